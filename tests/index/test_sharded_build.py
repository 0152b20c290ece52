"""A sharded index build (glmrag.index.shards, glmrag.jobs.index) merged equals the one-machine build.

The equality tests use musique_tiny (57 real passages, the HippoRAG OpenIE triples of musique100) with the
offline MiniLM: its synonym edges and question links come from real embeddings, and each shard embeds its own
phrases in its own batches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import glmrag.index.store as store
from glmrag.data.registry import load_dataset
from glmrag.data.types import Corpus, Passage
from glmrag.index.build import IndexSettings, build_index
from glmrag.index.cache import get_index
from glmrag.index.extractors import Extractor, OpenIEImportExtractor, PassageExtraction
from glmrag.index.kg import SYNONYM_RELATION
from glmrag.index.shards import Shard, ShardError, build_shard, merge_shards
from glmrag.jobs.common import compose_config
from glmrag.jobs.index import run_index
from glmrag.retrievers.dense import DenseRetriever
from glmrag.retrievers.ppr import PPRRetriever

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tiny_musique):
    return load_dataset(tiny_musique)


@pytest.fixture(scope="module")
def extractor(data):
    return OpenIEImportExtractor(data.openie_path)


@pytest.fixture(scope="module")
def one_machine(data, extractor, embedder):
    return build_index(data.corpus, data.qa, extractor, embedder, IndexSettings())


def sharded(data, extractor, embedder, n: int, root: Path, settings: IndexSettings | None = None):
    """Write the ``n`` shards (in reverse order: the merge must not depend on the order they finish), merge them."""
    settings = settings or IndexSettings()
    for i in reversed(range(n)):
        build_shard(data.corpus, extractor, embedder, settings, Shard(i, n), root)
    return merge_shards(root, data.corpus, data.qa, extractor, embedder, settings)


def named_triples(index, relation: str | None = None) -> set[tuple[str, str, str]]:
    return {
        (index.entities[h], index.relations[r], index.entities[t])
        for h, r, t in index.triples.tolist()
        if relation is None or index.relations[r] == relation
    }


def assert_same_index(merged, reference, corpus, questions) -> None:
    assert merged.entities == reference.entities
    assert merged.relations == reference.relations
    np.testing.assert_array_equal(merged.triples, reference.triples)
    assert named_triples(merged, SYNONYM_RELATION) == named_triples(reference, SYNONYM_RELATION)
    assert merged.passage_ids == reference.passage_ids == corpus.ids
    assert (merged.entity_passages != reference.entity_passages).nnz == 0
    assert (merged.passage_facts != reference.passage_facts).nnz == 0
    np.testing.assert_allclose(merged.entity_embeddings, reference.entity_embeddings, atol=1e-5)
    assert merged.question_links.keys() == reference.question_links.keys()
    for qid, links in reference.question_links.items():
        got = merged.question_links[qid]
        assert [(x.mention, x.entity) for x in got] == [(x.mention, x.entity) for x in links]
        np.testing.assert_allclose([x.score for x in got], [x.score for x in links], atol=1e-5)
    assert merged.manifest["counts"] == reference.manifest["counts"]
    for retriever in (PPRRetriever(), DenseRetriever()):
        got = retriever.retrieve(questions, merged, corpus, top_k=len(corpus))
        want = retriever.retrieve(questions, reference, corpus, top_k=len(corpus))
        assert [r.passage_ids for r in got] == [r.passage_ids for r in want], retriever.name


@pytest.mark.integration  # 6 s for 2 shards; the quick run merges without embeddings (below)
@pytest.mark.parametrize("n", [2, 3])
def test_sharded_build_merged_equals_one_machine_build(n, data, extractor, embedder, one_machine, tmp_path):
    counts = one_machine.manifest["counts"]
    assert counts["synonym_edges"] > 0 and counts["questions_linked"] == len(data.qa)  # the case shows something
    merged = sharded(data, extractor, embedder, n, tmp_path)
    assert_same_index(merged, one_machine, data.corpus, list(data.qa))
    assert merged.manifest["shards"] == n and one_machine.manifest["shards"] == 1
    # the extractor's report is summed over the shards: one OpenIE triple count, not n
    assert merged.manifest["extraction_report"]["triples"] == one_machine.manifest["extraction_report"]["triples"]


@pytest.mark.integration  # a sharded build per shard count
def test_shards_hold_consecutive_runs_of_passages(data, extractor, embedder, tmp_path):
    n = 3
    for i in range(n):
        build_shard(data.corpus, extractor, embedder, IndexSettings(), Shard(i, n), tmp_path)
    ids = []
    for i in range(n):
        manifest = json.loads((tmp_path / Shard(i, n).name / "manifest.json").read_text())
        rows = (tmp_path / Shard(i, n).name / "passages.jsonl").read_text().splitlines()
        ids += [json.loads(row)["id"] for row in rows]
        assert manifest["passages"] == [i * 57 // 3, (i + 1) * 57 // 3]  # 57 passages: 19 each
    assert ids == data.corpus.ids
    assert sorted(p.name for p in tmp_path.iterdir()) == [Shard(i, n).name for i in range(n)]  # no temp folders left


@pytest.mark.integration  # three sharded builds
def test_merge_settings_only_the_merge_reads_reuse_the_shards(data, extractor, embedder, one_machine, tmp_path):
    """Synonym settings belong to the merge: shards built with the defaults merge at another threshold."""
    sharded(data, extractor, embedder, 2, tmp_path)
    strict = IndexSettings(synonym_threshold=0.9)
    merged = merge_shards(tmp_path, data.corpus, data.qa, extractor, embedder, strict)
    reference = build_index(data.corpus, data.qa, extractor, embedder, strict)
    assert named_triples(merged, SYNONYM_RELATION) == named_triples(reference, SYNONYM_RELATION)
    assert merged.manifest["counts"]["synonym_edges"] < one_machine.manifest["counts"]["synonym_edges"]
    assert merged.manifest["settings"]["synonym_threshold"] == 0.9


# --- errors: missing, foreign and corrupt shards (a fixed extractor, no embeddings: no model to load) ---

PASSAGES = [Passage.make(f"t{i}", f"text {i}") for i in range(5)]
CORPUS = Corpus(PASSAGES)
NO_EMBEDDINGS = IndexSettings(embed_model=None)


class Fixed(Extractor):
    """Two entities and one triple per passage, from its title."""

    name = "fixed"

    def __init__(self, version: int = 1) -> None:
        super().__init__()
        self.version = version

    def settings(self) -> dict:
        return {"version": self.version}

    def extract(self, corpus):
        self.report = {"passages": len(corpus)}
        return [PassageExtraction(p.id, [p.title, "shared"], [(p.title, "in", "shared")]) for p in corpus]


def write_shards(root: Path, n: int, which=None, corpus=CORPUS, extractor=None, settings=NO_EMBEDDINGS) -> None:
    for i in which if which is not None else range(n):
        build_shard(corpus, extractor or Fixed(), None, settings, Shard(i, n), root)


def merge(root: Path, count: int | None = None):
    return merge_shards(root, CORPUS, [], Fixed(), None, NO_EMBEDDINGS, count)


def test_a_merge_without_embeddings_equals_the_build(tmp_path):
    write_shards(tmp_path, 2)
    merged, reference = merge(tmp_path), build_index(CORPUS, [], Fixed(), None, NO_EMBEDDINGS)
    assert merged.entities == reference.entities == sorted({p.title for p in PASSAGES} | {"shared"})
    np.testing.assert_array_equal(merged.triples, reference.triples)
    assert merged.manifest["extraction_report"] == reference.manifest["extraction_report"]


def test_a_missing_shard_is_named_with_its_command(tmp_path):
    write_shards(tmp_path, 3, which=[0, 2])
    with pytest.raises(ShardError, match=r"shard-00001-of-00003/manifest.json: shard 1/3 is missing.*shard=1/3"):
        merge(tmp_path)


def test_shards_of_another_corpus_are_refused(tmp_path):
    write_shards(tmp_path, 2, corpus=Corpus(PASSAGES[:4]))
    with pytest.raises(
        ShardError, match=r"shard-00000-of-00002/manifest.json: shard 0/2 was built from another corpus"
    ):
        merge(tmp_path)


def test_shards_of_other_settings_or_extractor_are_refused(tmp_path):
    write_shards(tmp_path / "a", 2, settings=IndexSettings(embed_model=None, include_isolated_entities=False))
    with pytest.raises(ShardError, match=r"settings.include_isolated_entities: shard has False, expected True"):
        merge(tmp_path / "a")
    write_shards(tmp_path / "b", 2, extractor=Fixed(version=2))
    with pytest.raises(ShardError, match=r"shard-00000-of-00002/manifest.json.*\n  extractor.settings: shard has"):
        merge(tmp_path / "b")


def test_a_corrupt_shard_is_refused(tmp_path):
    write_shards(tmp_path, 2)
    rows = tmp_path / Shard(1, 2).name / "passages.jsonl"
    rows.write_text(rows.read_text().replace("t4", "t9"))
    with pytest.raises(ShardError, match=r"shard-00001-of-00002/passages.jsonl: checksum mismatch; rerun.*shard=1/2"):
        merge(tmp_path)
    manifest = tmp_path / Shard(0, 2).name / "manifest.json"
    record = json.loads(manifest.read_text())
    del record["files"]["phrases.json"]
    manifest.write_text(json.dumps(record))
    with pytest.raises(ShardError, match=r"shard-00000-of-00002/manifest.json: lists files \['passages.jsonl'\]"):
        merge(tmp_path)
    manifest.write_text("[]")
    with pytest.raises(ShardError, match="not a shard of this index format"):
        merge(tmp_path)


def test_a_manifest_without_timings_is_refused_by_name(tmp_path):
    """Probe (issue 50): a shard manifest without timings_s was a raw KeyError at merge."""
    write_shards(tmp_path, 2)
    manifest = tmp_path / Shard(1, 2).name / "manifest.json"
    record = json.loads(manifest.read_text())
    del record["timings_s"]
    manifest.write_text(json.dumps(record))
    with pytest.raises(
        ShardError, match=r"shard-00001-of-00002/manifest.json: the manifest lacks or garbles 'timings_s'"
    ):
        merge(tmp_path)


def test_shards_of_two_splits_need_a_count(tmp_path):
    write_shards(tmp_path, 2)
    write_shards(tmp_path, 3)
    with pytest.raises(ShardError, match=r"shards of 2 different counts \[2, 3\]; merge one set with merge=<n>"):
        merge(tmp_path)
    assert merge(tmp_path, count=3).entities == merge(tmp_path, count=2).entities
    with pytest.raises(ShardError, match="no shard folders"):
        merge(tmp_path / "empty")


def test_shard_specs():
    assert Shard.parse("1/4") == Shard(1, 4) and str(Shard(1, 4)) == "1/4"
    assert [Shard(i, 3).bounds(10) for i in range(3)] == [(0, 3), (3, 6), (6, 10)]
    for bad in ("4/4", "1/0", "a/b", "-1/2"):
        with pytest.raises(ValueError, match="shard"):
            Shard.parse(bad)
    assert Shard.from_slurm({}) is None
    env = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert Shard.from_slurm(env) == Shard(2, 4)  # --array=1-4: task 3 is the third
    with pytest.raises(ValueError, match="--array=0-<n-1>"):
        Shard.from_slurm(env | {"SLURM_ARRAY_TASK_ID": "9"})


# --- the job: shards and merge through the Hydra config, stored where eval.py's index cache finds it ---


def job_config(tiny_musique, *overrides: str):
    base = ["data=musique100", f"data.name={tiny_musique}", "index.embed_cache_dir=null"]
    return compose_config("build_index", [*base, *overrides])


@pytest.mark.integration  # four index jobs
def test_job_shards_and_merge_store_the_index_the_cache_reads(
    tiny_musique, data, one_machine, glmrag_cache, monkeypatch
):
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")  # shard=null in an array job: the array task
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    folder = run_index(job_config(tiny_musique))
    assert folder.name == "shard-00001-of-00002" and folder.parent.parent == glmrag_cache / "indexes" / "shards"
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    run_index(job_config(tiny_musique, "shard=0/2"))
    merged = run_index(job_config(tiny_musique, "merge=true"))
    assert merged.manifest["shards"] == 2

    def no_build(*args, **kwargs):
        raise AssertionError("the cache rebuilt the index the merge stored")

    monkeypatch.setattr(store, "build_index", no_build)
    cached = get_index(data, job_config(tiny_musique).index)  # what eval.py and train.py call
    assert_same_index(cached, one_machine, data.corpus, list(data.qa))
    assert cached.manifest["shards"] == 2
    with pytest.raises(ValueError, match="writes one shard or merges, not both"):
        run_index(job_config(tiny_musique, "shard=0/2", "merge=true"))


@pytest.mark.integration  # python -m glmrag.jobs.index in subprocesses
def test_cli_runs(tmp_path):
    env = os.environ | {"GLMRAG_CACHE_DIR": str(tmp_path / "cache")}
    args = [sys.executable, "-m", "glmrag.jobs.index", "data=toy", "index.embed_model=null", "quiet=true"]
    args += [f"hydra.run.dir={tmp_path / 'out'}", f"shard_dir={tmp_path / 'shards'}"]
    run = subprocess.run([*args, "shard=1/2"], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stderr
    assert [p.name for p in (tmp_path / "shards").iterdir()] == ["shard-00001-of-00002"]
    assert not (tmp_path / "cache" / "indexes" / "shards").exists()  # shard_dir replaces the default folder
    run = subprocess.run([*args, "merge=2"], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert run.returncode == 1 and "shard 0/2 is missing" in run.stderr


def test_a_file_as_shard_dir_is_refused_by_name(tiny_musique, tmp_path):
    """Probe (issue 50): a file given as shard_dir was a raw FileExistsError."""
    from glmrag.jobs.index import shard_dir

    (afile := tmp_path / "afile").write_text("")
    with pytest.raises(NotADirectoryError, match=f"shard_dir={afile} is a file; give a folder"):
        shard_dir(job_config(tiny_musique, f"shard_dir={afile}"), None)
