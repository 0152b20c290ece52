"""DTKG's parts on tiny inputs: classifier routing, entity linking (Eq. 5), two-stage scoring (Eqs. 6-7),
the rerankers (App. A.4) and denoising (Eqs. 15-16)."""

import numpy as np
import pytest

from glmrag.index.normalize import normalize_phrase
from glmrag.retrievers.dtkg import prompts
from glmrag.retrievers.dtkg.classifier import TrackRouter
from glmrag.retrievers.dtkg.denoise import Denoiser
from glmrag.retrievers.dtkg.linking import EntityLinker, clean_mention
from glmrag.retrievers.dtkg.rerank import CrossEncoderReranker, LLMReranker
from glmrag.retrievers.dtkg.scoring import TextEmbeddings, TwoStageScorer, fuse
from glmrag.retrievers.dtkg.settings import DTKGSettings


@pytest.mark.parametrize(("reply", "track"), [("yes", "chain"), (" No.", "parallel")])
def test_classifier_asks_the_papers_yes_no_question(scripted_llm, reply, track):
    # DTKG §3.2: "If the classifier outputs 'yes', the question is classified as a chained multi-hop reasoning
    # question; if it outputs 'no', ... a parallel fact-verification question"
    llm = scripted_llm(lambda p: reply)
    assert TrackRouter(llm, "auto").route("Who is the wife of the director of Inception?", None) == track
    (prompt,) = llm.prompts
    assert prompt.count("Question:") == 7 and prompt.count("Chained: yes") == 3 and prompt.count("Chained: no") == 3
    assert all(f"{i}. " in prompt for i in range(1, 6))  # the five rules of Table 8
    assert "Reply with one word: yes or no." in prompt and "chained or parallel" not in prompt
    assert prompt.rstrip().endswith("Who is the wife of the director of Inception?\nChained:")
    assert llm.usage.total().events.get("label_fallback", 0) == 0


@pytest.mark.parametrize(("reply", "track"), [("chained", "chain"), (" Parallel.", "parallel"), ("yes", "chain")])
def test_classifier_track_name_labels_are_a_named_option(scripted_llm, reply, track):
    llm = scripted_llm(lambda p: reply)
    router = TrackRouter(llm, "auto", labels="chained_parallel")
    assert router.route("Who is the wife of the director of Inception?", None) == track
    (prompt,) = llm.prompts
    assert prompt.count("Type: chained") == 3 and "Reply with one word: chained or parallel." in prompt
    assert prompt.rstrip().endswith("Who is the wife of the director of Inception?\nType:")
    # "yes" is no track name: unreadable under these labels, so the chain fallback (counted)
    assert llm.usage.total().events.get("label_fallback", 0) == (reply == "yes")


@pytest.mark.parametrize("labels", ["yes_no", "chained_parallel"])
def test_classifier_falls_back_to_chain_and_counts_it(scripted_llm, labels):
    llm = scripted_llm(lambda p: "I am not sure")
    with llm.track("dtkg", "q"):
        router = TrackRouter(llm, "auto", labels)
        assert router.route("q?", None) == "chain"
    assert llm.usage.get("dtkg", "q").events == {"label_fallback": 1}
    assert router.reason.startswith("classifier fallback to chain")


def test_fixed_and_random_modes_call_no_llm(scripted_llm):
    llm = scripted_llm(lambda p: "parallel")
    assert TrackRouter(llm, "chain").route("q", None) == "chain"
    assert TrackRouter(llm, "parallel").route("q", None) == "parallel"
    router = TrackRouter(llm, "random")
    draws = [router.route("q", np.random.default_rng([0, i])) for i in range(40)]
    again = [router.route("q", np.random.default_rng([0, i])) for i in range(40)]
    assert draws == again and 10 < draws.count("chain") < 30
    assert llm.prompts == []


NAMES = ["Barack Obama", "Michelle Obama", "Paris", "Paris Hilton", "Hans Zimmer", "Christopher Nolan", "Inception"]


def test_linking_picks_the_most_similar_name():
    linker = EntityLinker(NAMES)
    assert linker.link("barack obama!").entity == 0 and linker.link("barack obama").similarity == 1.0
    assert linker.link("Barak Obama").entity == 0
    assert linker.link("Michele Obama").entity == 1
    assert linker.link("Paris Hiltn").entity == 3
    assert linker.link("christopher nolans").entity == 5
    assert linker.link("  ") is None and EntityLinker([]).link("x") is None


def test_clean_mention_drops_a_small_models_lead_in():
    assert clean_mention("The subject entity of this statement is Akinoshu Kenji.\nMore") == "Akinoshu Kenji"
    assert clean_mention("The main entity the question starts from is: David Jones.") == "David Jones"
    assert clean_mention('"Inception."') == "Inception" and clean_mention("Hans Zimmer") == "Hans Zimmer"
    assert clean_mention("The bomb was dropped") == "The bomb was dropped" and clean_mention("") == ""


def lcs_ratio(a: str, b: str) -> float:
    """Eq. 5's sim written out: 2 LCS(a, b) / (|a| + |b|), LCS by dynamic programming (independent of rapidfuzz)."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return 2 * prev[-1] / (len(a) + len(b)) if a or b else 1.0


def test_linking_equals_brute_force_lcs_argmax():
    rng = np.random.default_rng(0)
    words = ["river", "town", "saint", "john", "new", "york", "lake", "mount", "hall", "park", "west", "union"]
    names = list(dict.fromkeys(" ".join(rng.choice(words, rng.integers(1, 4))) for _ in range(300)))
    linker = EntityLinker(names, min_similarity=0.0)
    for mention in ["new yrk", "saint john lake", "mount west hal", "park union", "jon river town"]:
        norm = normalize_phrase(mention)
        ratios = [lcs_ratio(norm, n) for n in linker.names]
        link = linker.link(mention)
        assert link.similarity == pytest.approx(max(ratios))
        assert link.entity == ratios.index(max(ratios))  # ties to the lower id


def test_linking_finds_the_best_match_a_trigram_shortlist_missed():
    # "ab cd" vs a name sharing the letters in order but no trigram: the old trigram shortlist of 1 never saw it
    names = ["xab cdx yy", "ab  zz cd" + "q" * 30, "a b c d"]
    linker = EntityLinker(names, min_similarity=0.0)
    ratios = [lcs_ratio("ab cd", n) for n in linker.names]
    assert linker.link("ab cd").entity == ratios.index(max(ratios))


def test_linking_threshold_leaves_nonsense_unlinked():
    linker = EntityLinker(NAMES)
    assert linker.link("zzzz qqq") is None
    best = linker.best("zzzz qqq")
    assert best is not None and best.similarity < 0.5  # Eq. 5's bare argmax would link it anyway
    assert EntityLinker(NAMES, min_similarity=0.0).link("zzzz qqq") == best
    assert linker.link("Barak Obama").similarity == pytest.approx(lcs_ratio("barak obama", "barack obama"))
    with pytest.raises(ValueError, match="min_similarity"):
        EntityLinker(NAMES, min_similarity=1.5)


class TableEncoder:
    """Fixed unit vectors per text: the query is e0, candidate i is (c_i, sqrt(1 - c_i^2), 0...)."""

    def __init__(self, cosines: dict[str, float]) -> None:
        self.cosines = cosines

    def encode(self, texts):
        rows = []
        for t in texts:
            c = self.cosines.get(t, 1.0)
            rows.append([c, np.sqrt(1 - c * c), 0.0])
        return np.asarray(rows, dtype=np.float32)


class FixedReranker:
    def __init__(self, scores: dict[str, float]) -> None:
        self.scores, self.seen = scores, []

    def score(self, query, candidates):
        self.seen.append(list(candidates))
        return np.asarray([self.scores[c] for c in candidates])


COS = {"a": 0.9, "b": 0.1, "c": 0.5, "d": 0.7}
RR = {"a": 0.0, "b": 1.0, "c": 1.0, "d": 0.4}


def scorer(scoring: str, candidates: int = 2, alpha: float = 0.75):
    reranker = FixedReranker(RR)
    return TwoStageScorer(TextEmbeddings(TableEncoder(COS)), reranker, candidates, alpha, scoring), reranker


def test_stage_one_keeps_top_n_and_eq7_fuses():
    s, reranker = scorer("hybrid")
    out = s.score("q", list("abcd"), np.random.default_rng(0))
    assert reranker.seen == [["a", "d"]]  # top-2 cosines, best first
    expected = {p: 0.75 * RR[t] + 0.25 * COS[t] for p, t in zip([0, 3], "ad", strict=True)}
    assert out.positions.tolist() == [3, 0]  # d: 0.475 > a: 0.225
    assert out.scores == pytest.approx([expected[3], expected[0]], abs=1e-6)
    assert out.cosine == pytest.approx([0.7, 0.9], abs=1e-6)
    assert fuse(np.array([1.0]), np.array([0.2]), 0.5) == pytest.approx([0.6])


def test_scoring_ablations():
    rng = np.random.default_rng(0)
    cosine, reranker = scorer("cosine", candidates=3)
    out = cosine.score("q", list("abcd"), rng)
    assert out.positions.tolist() == [0, 3, 2] and out.scores == pytest.approx([0.9, 0.7, 0.5], abs=1e-6)
    assert reranker.seen == []
    rerank, reranker = scorer("rerank", candidates=1)
    out = rerank.score("q", list("abcd"), rng)
    assert reranker.seen == [list("abcd")]  # no stage-I filter
    assert out.positions.tolist() == [1, 2, 3, 0] and out.scores.tolist() == [1.0, 1.0, 0.4, 0.0]
    rand, _ = scorer("random", candidates=1)
    first = rand.score("q", list("abcd"), np.random.default_rng(5))
    second = rand.score("q", list("abcd"), np.random.default_rng(5))
    assert first.positions.tolist() == second.positions.tolist() and len(first.positions) == 4
    assert np.all((first.scores >= 0) & (first.scores < 1)) and np.all(np.diff(first.scores) <= 0)


def test_llm_reranker_scores_from_ranks_and_falls_back(scripted_llm):
    replies = {"alpha": "[3, 1]", "beta": "2, 2, 9, 1", "gamma": "no idea"}
    llm = scripted_llm(lambda p: next(r for k, r in replies.items() if f"Query: {k}" in p))
    reranker = LLMReranker(llm, listed=10)
    with llm.track("dtkg", "q"):
        out = reranker.score_many(["alpha", "beta", "gamma"], [["x", "y", "z"], ["x", "y", "z"], ["x", "y"]])
    assert len(llm.prompts) == 3 and "1. x\n2. y\n3. z" in llm.prompts[0]
    assert out[0].tolist() == [0.5, 0.0, 1.0]
    assert out[1].tolist() == [0.5, 1.0, 0.0]  # duplicates and out-of-range numbers dropped
    assert out[2].tolist() == [0.5, 0.5]
    events = llm.usage.get("dtkg", "q").events
    assert events["rerank_fallback"] == 1 and events["json_fallback"] == 1 and events["json_repaired"] == 1


def test_cross_encoder_reranker_is_the_sigmoid_of_the_logit(tmp_path):
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from glmrag.index.embed import DEFAULT_MODEL, resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        num_labels=1,
    )
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    query, candidates = "who directed inception", ["inception directed by christopher nolan", "paris is in france"]
    with torch.no_grad():
        batch = tokenizer([query] * 2, candidates, padding=True, return_tensors="pt")
        expected = torch.sigmoid(model(**batch).logits[:, 0]).numpy()
    scores = CrossEncoderReranker(str(tmp_path)).score(query, candidates)
    assert scores == pytest.approx(expected, abs=1e-5)
    assert np.all((scores > 0) & (scores < 1)) and scores[0] != scores[1]


def test_keyword_rule_matches_whole_words():
    d = Denoiser(DTKGSettings(), llm=None)
    assert [d.is_administrative(r) for r in ["has ID", "source of", "video version", "Metadata", "wikidata id"]] == [
        True
    ] * 5
    assert not any(d.is_administrative(r) for r in ["provided by", "identity of", "did", "resourced by"])


def test_screen_by_mode():
    labels, scores = ["born in", "has id", "lives in", "married to"], np.array([0.9, 0.9, 0.1, 0.2])
    assert Denoiser(DTKGSettings(denoise="none"), None).screen(labels, scores).all()
    generic = Denoiser(DTKGSettings(denoise="generic", threshold=0.2), None)
    assert generic.screen(labels, scores).tolist() == [True, False, False, True]


def test_necessity_threshold_and_fallback(scripted_llm):
    replies = {"born in": "8", "lives in": "Score: 2/10", "won": "maybe"}
    llm = scripted_llm(lambda p: next(r for k, r in replies.items() if f"Fact: x {k}" in p))
    aware = Denoiser(DTKGSettings(denoise="task_aware", necessity_threshold=0.5), llm)
    with llm.track("dtkg", "q"):
        assert aware.necessity("q?", ["x born in", "x lives in", "x won"]).tolist() == [0.8, 0.2, 1.0]
        assert aware.necessary("q?", ["x born in", "x lives in", "x won"]).tolist() == [True, False, True]
    assert llm.usage.get("dtkg", "q").events == {"necessity_fallback": 2}
    generic = Denoiser(DTKGSettings(denoise="generic"), llm)
    assert generic.necessary("q?", ["x lives in"]).tolist() == [True] and len(llm.prompts) == 6  # no new call


def test_cross_redundant_triples_stay_with_their_best_fact():
    groups = [[(1, 0.9), (2, 0.5)], [(2, 0.7), (3, 0.4)], [(1, 0.9)]]
    aware = Denoiser(DTKGSettings(denoise="task_aware"), None)
    assert aware.cross_redundant(groups) == [[(1, 0.9)], [(2, 0.7), (3, 0.4)], []]
    assert Denoiser(DTKGSettings(denoise="generic"), None).cross_redundant(groups) == groups


def test_settings_validate():
    with pytest.raises(ValueError, match="mode='both'"):
        DTKGSettings(mode="both")
    with pytest.raises(ValueError, match="max_width"):
        DTKGSettings(max_width=0)
    with pytest.raises(ValueError, match="alpha"):
        DTKGSettings(alpha=1.5)
    with pytest.raises(ValueError, match="classifier_labels='chain_or_not'"):
        DTKGSettings(classifier_labels="chain_or_not")
    with pytest.raises(ValueError, match="keywords='id' must be a list of words"):
        DTKGSettings(keywords="id")  # a bare string would be read as the letters i, d
    with pytest.raises(ValueError, match="'max_depth': True"):
        DTKGSettings(max_depth=True)
    from omegaconf import OmegaConf

    keywords = DTKGSettings(keywords=OmegaConf.create(["ID", "Source"])).keywords  # as a YAML list arrives
    assert keywords == ("id", "source") and isinstance(keywords, tuple)
    assert prompts.CLASS_CHOICES == {"yes_no": ("yes", "no"), "chained_parallel": ("chained", "parallel")}
