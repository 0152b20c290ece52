"""Every file in configs/llm instantiates, and its defaults are the constructors' own."""

import inspect
from pathlib import Path

import hydra
import pytest
from omegaconf import OmegaConf

import glmrag.index.cache  # noqa: F401  (registers the ${glmrag_cache:...} resolver)
from glmrag.io import cache_root
from glmrag.llm.http import HTTPLLM
from glmrag.llm.local import LocalLLM
from glmrag.llm.serve import LLMServer

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "llm"


@pytest.mark.parametrize(("name", "cls"), [("local", LocalLLM), ("http", HTTPLLM)])
def test_config_defaults_match_the_constructor(name, cls):
    cfg = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"{name}.yaml"))
    assert cfg.pop("_target_") == f"{cls.__module__}.{cls.__name__}"
    params = inspect.signature(cls).parameters
    assert set(cfg) <= set(params), set(cfg) - set(params)
    for key, value in cfg.items():
        default = params[key].default
        if key != "cache_dir" and default is not inspect.Parameter.empty and default is not None:
            assert value == default, key


def test_configs_instantiate(tiny_lm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    local = hydra.utils.instantiate(OmegaConf.load(CONFIGS / "local.yaml"), model=str(tiny_lm_dir))
    assert isinstance(local, LocalLLM)
    with LLMServer(local, model_name="offline:smollm2-135m-instruct") as server:
        cfg = OmegaConf.load(CONFIGS / "http.yaml")
        with hydra.utils.instantiate(cfg, base_url=server.base_url, api_key_env=None) as llm:
            assert llm.cache_dir == cache_root() / "llm_cache" == tmp_path / "llm_cache"
            (g,) = llm.generate([[{"role": "user", "content": "hi"}]], max_new_tokens=3)
            assert g.text == local.generate([[{"role": "user", "content": "hi"}]], max_new_tokens=3)[0].text
