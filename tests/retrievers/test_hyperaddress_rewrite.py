"""HyperAddress rewriting (Read the Route §4.2, App. A): a description is replaced, a named anchor never."""

import re

import numpy as np
import pytest
from transformers import AutoTokenizer

from glmrag.data.types import Corpus, Passage, Question
from glmrag.index.embed import DEFAULT_MODEL, resolve_model_path
from glmrag.index.synthetic import build_kg
from glmrag.retrievers.hyperaddress import HyperAddressRetriever, HyperAddressSettings
from glmrag.retrievers.hyperaddress.reader_pointers import Reader
from glmrag.retrievers.hyperaddress.rewrite import anchor_spans, candidate_spans, without_title
from glmrag.retrievers.hyperaddress.steering import Steering, SteeringSettings


def spans_text(question, spans):
    return [question[a:b] for a, b in spans]


@pytest.mark.parametrize(
    ("question", "anchor"),
    [
        ("Which company published Journal of Psychotherapy Integration?", "Journal of Psychotherapy Integration"),
        ("In which country is the district where the Bubye River is found?", "Bubye River"),
        ("Who founded the label of Paris Hilton in 2004?", "Paris Hilton"),
        ('What is the genre of "the long goodbye" by the band?', '"the long goodbye"'),
    ],
)
def test_no_candidate_span_touches_a_named_anchor(question, anchor):
    start = question.index(anchor)
    end = start + len(anchor)
    spans = candidate_spans(question, 4, anchor_spans(question))
    assert spans  # the question still has description words to rewrite
    assert not any(a < end and start < b for a, b in spans), spans_text(question, spans)


def test_anchors_cover_years_and_lower_case_titles():
    question = "who was the director of the journal of psychotherapy integration in 1991"
    anchors = spans_text(question, anchor_spans(question, titles=["Journal of Psychotherapy Integration"]))
    assert "1991" in anchors and "journal of psychotherapy integration" in anchors
    spans = spans_text(
        question, candidate_spans(question, 4, anchor_spans(question, ["Journal of Psychotherapy Integration"]))
    )
    assert "the director" in spans and not any("journal" in s or "1991" in s for s in spans)
    assert "of the" not in spans and "who was" not in spans  # function words alone are no description


def test_title_prefix_is_not_part_of_the_description():
    assert without_title("Journal X: It is published by APA.", "Journal X") == "It is published by APA."
    assert without_title("Journal Y: It is published by APA.", "Journal X") == "Journal Y: It is published by APA."


class WordEncoder:
    """Bag of lower-case words (punctuation dropped), unit rows: the cosine is the word overlap; no model to load."""

    def encode(self, texts):
        bags = [re.findall(r"[a-z0-9]+", t.lower()) for t in texts]
        out = np.zeros((len(texts), 512), dtype=np.float32)
        for i, words in enumerate(bags):
            for w in words:
                out[i, hash_word(w)] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def hash_word(word: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % 512


# MuSiQue-like: sentence labels carry "{title}: ", so the title span matches the publisher's label in P0
CORPUS = Corpus(
    [
        Passage.make(
            "Journal of Psychotherapy Integration",
            "Journal of Psychotherapy Integration is published by the American Psychological Association.",
        ),
        Passage.make(
            "American Psychological Association",
            "The American Psychological Association is the largest association of psychologists in Washington.",
        ),
        Passage.make("Washington", "Washington is the capital of the United States."),
    ]
)
MENTIONS = [
    ["journal of psychotherapy integration", "american psychological association"],
    ["american psychological association", "psychologists", "washington"],
    ["washington", "united states"],
]
NAMES = list(dict.fromkeys(m for ms in MENTIONS for m in ms))
QUESTION = Question(
    "q",
    "Where is the largest association of psychologists that publishes Journal of Psychotherapy Integration?",
    ("Washington",),
    (),
)


def index():
    kg = build_kg([], len(NAMES), [[NAMES.index(m) for m in ms] for ms in MENTIONS], passage_ids=CORPUS.ids)
    kg.entities[:] = NAMES
    return kg


@pytest.fixture(scope="module")
def reader(tiny_llama):
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    return Reader(tiny_llama(tokenizer.vocab_size, max_position_embeddings=512), tokenizer, "tiny-llama-test")


def steered(reader, question=QUESTION, **kw):
    kw = {
        "rounds": 2,
        "read_top": 3,
        "heads": [(0, 0), (1, 2)],
        "rewrite_candidates": 10,
        "rewrite_threshold": 0.5,
    } | kw
    steering = Steering(reader, SteeringSettings(**kw))
    retriever = HyperAddressRetriever(HyperAddressSettings(restart_top=5), encoder=WordEncoder(), steering=steering)
    retriever.retrieve([question], index(), CORPUS, top_k=3)
    return retriever, steering


def test_rewrite_replaces_the_description_and_keeps_the_title(reader):
    _, steering = steered(reader)
    before, after = steering.rewrites["q"]
    assert before == QUESTION.question
    assert "Journal of Psychotherapy Integration" in after  # the named anchor stays
    assert after.startswith("Where American Psychological Association") and after.endswith(
        "that publishes Journal of Psychotherapy Integration?"
    )
    rewrite = steering.traces["q"]["rounds"][0]["rewrite"]
    assert rewrite["span"] in "is the largest association of psychologists" and rewrite["before"] == before
    assert rewrite["cosine"] >= 0.5 and not rewrite["label"].startswith("American Psychological Association:")


def test_a_question_of_anchors_only_is_never_rewritten(reader):
    question = Question("q", "Journal of Psychotherapy Integration American Psychological Association?", ("x",), ())
    _, steering = steered(reader, question, rewrite_threshold=0.0)
    assert steering.rewrites["q"] == [question.question]
    assert steering.traces["q"]["rounds"][0]["rewrite"] == "none"


def test_the_rewritten_question_restarts_with_weight_two(reader, monkeypatch):
    restarts = []
    pagerank = HyperAddressRetriever.pagerank

    def recording(self, graph, weights, r_p, r_e):
        restarts.append((r_p.copy(), r_e.copy()))
        return pagerank(self, graph, weights, r_p, r_e)

    monkeypatch.setattr(HyperAddressRetriever, "pagerank", recording)
    retriever, steering = steered(reader, pointer_weight=0.0)  # pointer terms weigh 0: question + rewrite only
    before, after = steering.rewrites["q"]
    hyper = retriever.prepare(index(), CORPUS)
    q_p, q_e = retriever.restart_for(hyper, [before])
    w_p, w_e = retriever.restart_for(hyper, [after])
    final_p, final_e = restarts[-1]
    assert final_p == pytest.approx((q_p[:, 0] + 2 * w_p[:, 0]) / 3)  # App. A: "weighted 2"
    assert final_e == pytest.approx((q_e[:, 0] + 2 * w_e[:, 0]) / 3)


def test_rewrite_needs_two_rounds():
    with pytest.raises(ValueError, match="rewrite=True with rounds=1"):
        Steering(None, SteeringSettings(rounds=1, rewrite=True))
    assert SteeringSettings(rounds=1).rewrite is False and SteeringSettings(rounds=2).rewrite is True
    assert Steering(None).settings.rewrite is True  # the default: two rounds, one rewrite


@pytest.mark.parametrize(
    ("question", "name"),
    [
        ("David Jones is an international in rugby union and another sport that was started when?", "rugby union"),
        ("Who led the reign of terror in the country where the revolution began?", "reign of terror"),
        ("What ended the tiananmen square protests in the capital of the country?", "tiananmen square protests"),
        ("Which king broke with the pope to found anglicanism in the island country?", "anglicanism"),
    ],
)
def test_linked_names_are_anchors_whatever_their_case(question, name):
    start = question.index(name)
    end = start + len(name)
    unprotected = candidate_spans(question, 4, anchor_spans(question))
    assert any(a < end and start < b for a, b in unprotected)  # lower case: no anchor by capitals alone
    for given in (name, name.title()):  # the index's entity name, or an NER mention written otherwise
        spans = candidate_spans(question, 4, anchor_spans(question, names=[given]))
        assert spans and not any(a < end and start < b for a, b in spans), spans_text(question, spans)


def test_the_retriever_protects_the_questions_linked_mentions(reader):
    from glmrag.index.kg import EntityLink

    # without links the best span is "is the largest association" (test above); an NER mention over it keeps it
    kg = index()
    kg.question_links["q"] = [EntityLink("largest association", NAMES.index("american psychological association"), 1)]
    kw = {"rounds": 2, "read_top": 3, "heads": [(0, 0), (1, 2)], "rewrite_candidates": 10, "rewrite_threshold": 0.5}
    steering = Steering(reader, SteeringSettings(**kw))
    HyperAddressRetriever(HyperAddressSettings(restart_top=5), encoder=WordEncoder(), steering=steering).retrieve(
        [QUESTION], kg, CORPUS, 3
    )
    assert steering.traces["q"]["rounds"][0]["rewrite"] == "none"  # no other span reaches the threshold
    _, unlinked = steered(reader, **kw)
    assert "largest association" in unlinked.traces["q"]["rounds"][0]["rewrite"]["span"]


class LabelsOf:
    """Each entity labelled by a fixed description."""

    name = "fixed"

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels

    def describe(self, passage, entities):
        return [(self.labels[e],) for e in entities]


def test_an_entity_the_question_names_is_no_rewrite_candidate():
    from glmrag.graph.hypergraph import Hypergraph
    from glmrag.retrievers.hyperaddress.reader_pointers import ReadContext

    graph = Hypergraph()
    passages = [Passage.make("Ann Lee", "Ann Lee, the first president of the society, was born in Boston.")]
    labels = {"ann lee": "first president of the society", "boston": "a city in massachusetts"}
    graph.add_passages(passages, [["ann lee", "boston"]], LabelsOf(labels))
    ann, boston = graph.entities.index("ann lee"), graph.entities.index("boston")
    context = ReadContext(None, None, [ann, boston], None, [0], {ann: "Ann Lee", boston: "Boston"})
    question = "Was ann lee the first president of the society born in a city in massachusetts?"
    steering = Steering(None, SteeringSettings(rounds=2, rewrite_candidates=1, rewrite_threshold=0.5))
    retriever = HyperAddressRetriever(encoder=WordEncoder())
    # ann lee points highest, but the question names it (lower case): the one candidate is boston
    new = steering.rewritten(retriever, graph, lambda p: passages[p], context, np.array([0.9, 0.5]), question)
    assert (new.entity, new.span) == (boston, "a city in massachusetts")
    assert new.after == "Was ann lee the first president of the society born in Boston?"
