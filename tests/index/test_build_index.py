import json
from pathlib import Path

import numpy as np
import pytest

from glmrag.data.types import Corpus, Passage, QASet, Question
from glmrag.index.build import IndexSettings, build_index, expected_manifest, number_groups
from glmrag.index.embed import Embedder
from glmrag.index.extractors import Extractor, OpenIEImportExtractor, PassageExtraction, SpacyExtractor
from glmrag.index.kg import SYNONYM_RELATION
from glmrag.index.resolve import nearest, synonym_pairs

P1 = Passage.make("Thomas Sudhof", "Thomas Sudhof is a professor at Stanford University.")
P2 = Passage.make("Stanford", "Stanford Univ. is in California. Harvard University is not.")
P3 = Passage.make("Banana", "A banana is a fruit.")
CORPUS = Corpus([P1, P2, P3])
FIXED = {
    P1.title: (
        ["Thomas Sudhof", "Professor"],
        [
            ("Thomas Sudhof", "works at", "Stanford University"),
            ("Thomas Sudhof", "professor at", "Stanford University"),
            ("Thomas Sudhof", "works at", "Stanford University!"),
        ],
    ),
    P2.title: (
        ["Stanford Univ.", "California", "Harvard University"],
        [("Stanford Univ.", "located in", "California")],
    ),
    P3.title: (["Banana", "—"], [("banana", "is a", "fruit"), ("banana", "?", "fruit")]),
}
Q1 = Question("q1", "Where does Thomas Sudhof work?", ("Stanford University",), (P1.id, P2.id))
Q2 = Question("q2", "what is it?", ("nothing",), ())


class FixedExtractor(Extractor):
    """Returns hand-written extractions keyed by passage title."""

    name = "fixed"

    def __init__(self, by_title=FIXED):
        super().__init__()
        self.by_title = by_title

    def settings(self) -> dict:
        return {"titles": sorted(self.by_title)}

    def extract(self, corpus):
        self.report = {"passages": len(corpus)}
        return [PassageExtraction(p.id, *self.by_title[p.title]) for p in corpus]


@pytest.fixture(scope="module")
def index(embedder):
    return build_index(CORPUS, [Q1, Q2], FixedExtractor(), embedder, IndexSettings())


def _triples(index, relation=None):
    return {
        (index.entities[h], index.relations[r], index.entities[t])
        for h, r, t in index.triples.tolist()
        if relation is None or index.relations[r] == relation
    }


def test_vocabularies_are_sorted_normalised_phrases(index):
    assert index.entities == sorted(index.entities)
    assert {
        "thomas sudhof",
        "stanford university",
        "stanford univ",
        "california",
        "harvard university",
        "banana",
    } <= set(index.entities)
    assert "" not in index.entities
    assert index.relations == sorted(index.relations) and SYNONYM_RELATION in index.relations


def test_every_relation_between_a_pair_is_kept(index):
    pair = {(h, r, t) for h, r, t in _triples(index) if (h, t) == ("thomas sudhof", "stanford university")}
    # "Stanford University!" normalises onto "stanford university": 3 raw triples, 2 distinct
    assert pair == {
        ("thomas sudhof", "works at", "stanford university"),
        ("thomas sudhof", "professor at", "stanford university"),
    }
    assert len(np.unique(index.triples, axis=0)) == len(index.triples)


def test_synonym_edges_join_spellings_not_neighbours(index):
    syn = {(h, t) for h, _, t in _triples(index, SYNONYM_RELATION)}
    assert ("stanford university", "stanford univ") in syn and ("stanford univ", "stanford university") in syn
    assert not any("harvard university" in pair for pair in syn)  # cosine 0.77 with "stanford university"
    assert not any("banana" in pair or "california" in pair for pair in syn)
    assert index.manifest["counts"]["synonym_edges"] == len(syn)


def test_passage_entity_map_has_extracted_entities_and_triple_endpoints(index):
    names = lambda pid: {index.entities[e] for e in index.entities_of_passages([pid])}  # noqa: E731
    assert names(P1.id) == {"thomas sudhof", "professor", "stanford university"}
    assert names(P3.id) == {"banana", "fruit"}
    assert index.entities_of_passages(list(Q2.supporting)) == []  # no gold passage, no target


def test_passage_fact_map_counts_each_passages_normalised_facts(index):
    facts = lambda pid: {  # noqa: E731
        tuple(index.entities[h] if i != 1 else index.relations[h] for i, h in enumerate(index.triples[t]))
        for t in index.passage_facts[index.passage_position[pid]].indices
    }
    # P1 states "works at" twice (once as "Stanford University!"): one fact, stated twice
    assert facts(P1.id) == {
        ("thomas sudhof", "works at", "stanford university"),
        ("thomas sudhof", "professor at", "stanford university"),
    }
    assert facts(P2.id) == {("stanford univ", "located in", "california")}
    assert facts(P3.id) == {("banana", "is a", "fruit")}  # the "?" relation normalises to nothing: dropped
    assert index.passage_facts.shape == (len(CORPUS), len(index.triples))
    works_at = (
        index.entity_id["thomas sudhof"],
        index.relations.index("works at"),
        index.entity_id["stanford university"],
    )
    row = next(t for t, triple in enumerate(index.triples.tolist()) if tuple(triple) == works_at)
    assert index.passage_facts[index.passage_position[P1.id], row] == 2.0
    assert index.passage_facts.sum() == 5.0  # the 6 raw triples less the one whose relation normalises to ""
    synonym = index.relations.index(SYNONYM_RELATION)
    assert index.passage_facts[:, np.flatnonzero(index.triples[:, 1] == synonym)].nnz == 0


def test_question_links(index):
    links = index.question_links["q1"]
    assert [index.entities[link.entity] for link in links][:1] == ["thomas sudhof"]
    assert links[0].mention == "Thomas Sudhof" and links[0].score == pytest.approx(1.0, abs=1e-4)
    assert len({link.entity for link in links}) == len(links)
    # no noun chunk or entity in "what is it?": the whole question is the mention
    assert [link.mention for link in index.question_links["q2"]] == ["what is it?"]
    assert index.seeds("q1")[0] == index.entity_id["thomas sudhof"]


def test_manifest(index):
    m = index.manifest
    assert m["corpus_hash"] == CORPUS.content_hash()
    assert m["questions_hash"] == QASet([Q1, Q2]).content_hash()
    assert m["extractor"] == {"name": "fixed", "settings": {"titles": sorted(FIXED)}}
    assert m["settings"]["synonym_threshold"] == 0.8 and m["settings"]["synonym_top_k"] == 100
    assert m["extraction_report"] == {
        "passages": 3,
        "entities_empty_after_normalize": 1,
        "triples_empty_after_normalize": 1,
    }
    assert m["counts"]["entities"] == index.num_entities and m["counts"]["triples"] == len(index.triples)
    assert m["counts"]["questions_linked"] == 2
    assert expected_manifest(CORPUS, [Q1, Q2], FixedExtractor(), IndexSettings()).items() <= m.items()
    json.dumps(m)
    assert index.entity_embeddings.shape == (index.num_entities, 384)


def test_a_question_with_no_close_entity_is_counted_or_left_unlinked(index, embedder):
    best_q2 = max(link.score for link in index.question_links["q2"])  # "what is it?" names no entity
    threshold = (best_q2 + 1.0) / 2  # above q2's best link, below q1's exact match (cosine 1.0)
    kept = build_index(CORPUS, [Q1, Q2], FixedExtractor(), embedder, IndexSettings(link_min_score=threshold))
    assert [link.score for link in kept.question_links["q2"]] == [pytest.approx(best_q2)]  # GFM-RAG: its best
    assert kept.manifest["counts"]["questions_fallback_linked"] == 1
    assert index.manifest["counts"]["questions_fallback_linked"] == 0  # link_min_score 0: nothing falls back
    settings = IndexSettings(link_min_score=threshold, link_fallback=False)
    dropped = build_index(CORPUS, [Q1, Q2], FixedExtractor(), embedder, settings)
    assert dropped.question_links["q2"] == [] and dropped.manifest["counts"]["questions_linked"] == 1
    assert dropped.question_links["q1"] == kept.question_links["q1"]


def test_without_embeddings_links_exact_phrases_only():
    settings = IndexSettings(embed_model=None, include_isolated_entities=False)
    index = build_index(CORPUS, [Q1], FixedExtractor(), None, settings)
    assert index.entity_embeddings is None and not _triples(index, SYNONYM_RELATION)
    assert "harvard university" not in index.entities and "professor" not in index.entities  # in no triple
    assert [(link.mention, link.score) for link in index.question_links["q1"]] == [("Thomas Sudhof", 1.0)]


def test_settings_are_validated_and_must_match_the_embedder():
    with pytest.raises(ValueError, match="synonym_threshold"):
        IndexSettings(synonym_threshold=1.5)
    with pytest.raises(ValueError, match="synonym_top_k"):
        IndexSettings(synonym_top_k=-1)
    with pytest.raises(ValueError, match="embed_model"):
        build_index(CORPUS, [], FixedExtractor(), Embedder("other-model"), IndexSettings())


def test_synonym_pairs_match_a_dense_reference():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(40, 16)).astype(np.float32)
    emb = np.concatenate([base, base + 0.3 * rng.normal(size=base.shape).astype(np.float32)])
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    sims = emb @ emb.T
    eligible = np.arange(len(emb)) % 7 != 0
    pairs, scores = synonym_pairs(emb, 0.5, 2, eligible, chunk_rows=7)
    expected = []
    for i in np.flatnonzero(eligible):
        order = [j for j in np.argsort(-sims[i], kind="stable") if j != i and sims[i, j] >= 0.5][:2]
        expected += [(i, j) for j in order]
    assert [tuple(p) for p in pairs.tolist()] == expected
    assert np.allclose(scores, [sims[i, j] for i, j in expected])
    same, _ = synonym_pairs(emb, 0.5, 2, eligible)  # one block
    assert np.array_equal(same, pairs)
    groups = np.arange(len(emb)) % 40  # each base vector with its noisy copy only
    grouped, _ = synonym_pairs(emb, -1.0, 5, None, groups, chunk_rows=3)
    assert all(abs(i - j) == 40 for i, j in grouped.tolist()) and len(grouped) == 80
    idx, best = nearest(emb[:5], emb, chunk_rows=2)
    assert idx.tolist() == [0, 1, 2, 3, 4] and np.allclose(best, 1.0)


def test_number_groups_keep_dates_apart():
    g = number_groups(["july 2015", "july 18 2012", "18 2012 july", "2012 olympics", "silver 2012", "paris", "rome"])
    assert g[0] != g[1] and g[1] == g[2] and g[3] == g[4] and g[5] == g[6] != g[0]


def test_spacy_index_end_to_end(embedder):
    corpus = Corpus([Passage.make("Thomas Südhof", "Thomas Sudhof is a professor at Stanford University.")])
    question = Question("q", "Which university employs Thomas Sudhof?", ("Stanford University",), (corpus[0].id,))
    index = build_index(corpus, [question], SpacyExtractor(), embedder)
    assert ("thomas sudhof", "is professor at", "stanford university") in _triples(index)
    assert ("thomas südhof", SYNONYM_RELATION, "thomas sudhof") in _triples(index)
    assert index.entity_id["thomas sudhof"] in index.seeds("q")


DATA = Path("/work/shared/data/musique-hipporag-100")


@pytest.mark.slow
def test_musique_index_from_openie(embedder):
    corpus = Corpus(
        [Passage.make(x["title"], x["text"]) for x in json.loads((DATA / "musique_train_corpus.json").read_text())]
    )
    raw = json.loads((DATA / "musique_train.json").read_text())
    questions = [
        Question(
            q["id"],
            q["question"],
            (q["answer"],),
            tuple(Passage.make(p["title"], p["paragraph_text"]).id for p in q["paragraphs"] if p["is_supporting"]),
        )
        for q in raw
    ]
    extractor = OpenIEImportExtractor(DATA / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json")
    index = build_index(corpus, questions, extractor, embedder)
    counts = index.manifest["counts"]
    assert counts["passages"] == 1890 and counts["questions_linked"] == 100
    assert 15_000 < counts["entities"] < 25_000 and counts["extracted_triples"] > 16_000
    assert all(index.entities_of_passages(list(q.supporting)) for q in questions)


@pytest.mark.parametrize("seed", range(5))
def test_grouped_blocked_synonym_search_equals_a_dense_reference(seed):
    """Random clustered embeddings, groups, eligibility, thresholds, top-k and block sizes: the per-group,
    eligible-rows-only blocked search returns exactly the pairs of a dense search over all (i, j)."""
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(30, 120)), 12
    centres = rng.normal(size=(max(n // 6, 1), d))
    emb = centres[rng.integers(0, len(centres), n)] + 0.35 * rng.normal(size=(n, d))
    emb = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    sims = emb @ emb.T
    eligible = rng.random(n) < 0.8
    groups = rng.integers(0, 3, n) if seed % 2 else None
    threshold, top_k = float(rng.uniform(0.3, 0.9)), int(rng.integers(1, 6))
    expected = []
    for i in np.flatnonzero(eligible):
        ok = [j for j in range(n) if j != i and sims[i, j] >= threshold and (groups is None or groups[i] == groups[j])]
        expected += [(int(i), j) for j in sorted(ok, key=lambda j: (-sims[i, j], j))[:top_k]]
    pairs, scores = synonym_pairs(emb, threshold, top_k, eligible, groups, chunk_rows=int(rng.integers(1, 20)))
    assert [tuple(p) for p in pairs.tolist()] == expected
    np.testing.assert_allclose(scores, [sims[i, j] for i, j in expected], atol=1e-6)
