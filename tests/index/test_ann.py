"""Synonym search above ``synonym_exact_max``: the approximate (faiss IVF) search against the exact one."""

import logging

import numpy as np
import pytest

from glmrag.data.types import Corpus, Passage
from glmrag.index import ann
from glmrag.index.build import IndexSettings, build_index
from glmrag.index.extractors import Extractor, PassageExtraction
from glmrag.index.resolve import synonym_pairs
from glmrag.index.synthetic import clustered_embeddings


def _dense_reference(emb, threshold, top_k, eligible, groups):
    """Pairs of a dense (E, E) search written out: the definition of a synonym pair."""
    sims = emb @ emb.T
    out = set()
    for i in np.flatnonzero(eligible):
        ok = [j for j in range(len(emb)) if j != i and sims[i, j] >= threshold and groups[i] == groups[j]]
        out.update((int(i), j) for j in sorted(ok, key=lambda j: (-sims[i, j], j))[:top_k])
    return out


@pytest.fixture(scope="module")
def clustered():
    return clustered_embeddings(3000, dim=384, seed=1)


def test_approximate_search_finds_at_least_99_percent_of_the_exact_pairs_and_nothing_else(clustered):
    emb = clustered
    eligible = np.random.default_rng(0).random(len(emb)) < 0.9
    groups = np.zeros(len(emb), dtype=np.int64)
    want = _dense_reference(emb, 0.8, 10, eligible, groups)
    pairs, scores = synonym_pairs(emb, 0.8, 10, eligible, exact_max=0)
    got = set(map(tuple, pairs.tolist()))
    assert len(want) > 2000  # the set is built to have many synonyms, some entities more than top-k
    assert len(got & want) >= 0.99 * len(want)  # 0.9996 here; 0.985 with one probed cell instead of 8
    # every returned pair qualifies (one missed above a row's top-k lets a lower-ranked qualifying one in)
    np.testing.assert_allclose(scores, [float(emb[i] @ emb[j]) for i, j in pairs.tolist()], atol=1e-5)
    assert scores.min() >= 0.8 and eligible[pairs[:, 0]].all() and np.all(pairs[:, 0] != pairs[:, 1])
    assert np.bincount(pairs[:, 0]).max() <= 10
    # ordered like the exact search: by row, then descending score
    assert np.all(np.diff(pairs[:, 0]) >= 0)
    same_row = pairs[1:, 0] == pairs[:-1, 0]
    assert np.all(scores[1:][same_row] <= scores[:-1][same_row])


def test_only_groups_above_the_limit_are_approximate_and_the_rest_equal_the_exact_search(clustered, monkeypatch):
    emb = clustered[:600]
    groups = (np.arange(len(emb)) >= 500).astype(np.int64)  # one group of 500, one of 100
    eligible = np.ones(len(emb), dtype=bool)
    sizes = []
    real = ann.ivf_candidates
    monkeypatch.setattr(
        "glmrag.index.resolve.ivf_candidates", lambda keys, *a, **k: sizes.append(len(keys)) or real(keys, *a, **k)
    )
    pairs, _ = synonym_pairs(emb, 0.8, 100, eligible, groups, exact_max=100)
    assert sizes == [500]
    small = {p for p in map(tuple, pairs.tolist()) if p[0] >= 500}
    assert small == {p for p in _dense_reference(emb, 0.8, 100, eligible, groups) if p[0] >= 500}
    exact, _ = synonym_pairs(emb, 0.8, 100, eligible, groups, exact_max=600)
    assert sizes == [500] and set(map(tuple, exact.tolist())) == _dense_reference(emb, 0.8, 100, eligible, groups)


def test_the_approximate_search_is_deterministic(clustered):
    first, _ = synonym_pairs(clustered, 0.8, 100, exact_max=0)
    again, _ = synonym_pairs(clustered.copy(), 0.8, 100, exact_max=0)
    assert np.array_equal(first, again)


class Spellings(Extractor):
    """Passages whose entities are spellings of each other (for synonym edges)."""

    name = "spellings"

    def settings(self) -> dict:
        return {}

    def extract(self, corpus):
        return [PassageExtraction(p.id, [p.title, p.text]) for p in corpus]


SPELLINGS = Corpus(
    [Passage.make("Thomas Sudhof", "Thomas Südhof"), Passage.make("Stanford University", "Stanford Univ")]
)


def test_build_logs_the_embedding_and_synonym_stage_lines_unless_quiet(embedder, caplog, monkeypatch):
    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    with caplog.at_level(logging.INFO, logger="glmrag.progress"):
        index = build_index(SPELLINGS, [], Spellings(), embedder, IndexSettings())
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("embedding: 4 phrases in ") for line in lines), lines
    assert any(line.startswith("synonym search: 4 entities in ") for line in lines), lines
    assert index.manifest["counts"]["synonym_edges"] == 4
    caplog.clear()
    monkeypatch.setenv("GLMRAG_QUIET", "1")
    with caplog.at_level(logging.INFO, logger="glmrag.progress"):
        build_index(SPELLINGS, [], Spellings(), embedder, IndexSettings())
    assert not caplog.records
