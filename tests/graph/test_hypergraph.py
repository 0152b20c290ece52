import numpy as np
import pytest

from glmrag.data.types import Corpus, Passage
from glmrag.graph.hypergraph import (
    Hypergraph,
    SentenceDescriber,
    index_mentions,
    index_passages,
    mention_spans,
    split_sentences,
)

PASSAGES = [
    Passage.make("Journal X", "The Journal X is published by the Society Y. It started in 1960."),
    Passage.make("Society Y", "Society Y is an association. Its first president was Ann Lee."),
    Passage.make("Ann Lee", "Ann Lee (born 1901) was a psychologist. She led Society Y until 1950."),
    Passage.make("São Paulo", "São Paulo, Brazil is a city. Nothing else."),
]
MENTIONS = [
    ["journal x", "society y", "1960"],
    ["society y", "ann lee"],
    ["ann lee", "society y", "1950"],
    ["são paulo brazil"],
]


class CountingDescriber(SentenceDescriber):
    def __init__(self) -> None:
        super().__init__()
        self.described: list[str] = []

    def describe(self, passage, entities):
        self.described.append(passage.id)
        return super().describe(passage, entities)


def test_mention_spans_match_normalised_phrases():
    text = "São Paulo, Brazil and SÃO PAULO BRAZIL; not são paulobrazil."
    assert [text[a:b] for a, b in mention_spans(text, "são paulo brazil")] == ["São Paulo, Brazil", "SÃO PAULO BRAZIL"]
    assert mention_spans("The Society Y is", "society y") == [(4, 13)]
    assert mention_spans("Society Yz", "society y") == [] and mention_spans("anything", "!!") == []
    assert split_sentences("A b. C d? E!  F") == ["A b.", "C d?", "E!", "F"]


def test_sentence_descriptions_and_weights():
    graph = Hypergraph()
    graph.add_passages(PASSAGES, MENTIONS, SentenceDescriber())
    assert graph.entities == ["journal x", "society y", "1960", "ann lee", "1950", "são paulo brazil"]
    sizes = graph.edge_sizes()
    assert sizes.tolist() == [1, 3, 1, 2, 1, 1]
    # |e|^-1/2 per incidence (HyperAddress §4.1)
    assert graph.incidence_weights() == pytest.approx(1.0 / np.sqrt(sizes[graph.incidence_entity]))
    h = graph.incidence_matrix().toarray()
    assert h[1, 1] == pytest.approx(3**-0.5) and h[1, 3] == pytest.approx(2**-0.5) and h[0, 3] == 0.0
    pairs = zip(graph.incidence_passage.tolist(), graph.incidence_entity.tolist(), strict=True)
    labels = dict(zip(pairs, graph.labels, strict=True))
    assert labels[(0, 2)] == ("Journal X: It started in 1960.",)
    assert labels[(1, 3)] == ("Society Y: Its first president was Ann Lee.",)
    assert labels[(2, 1)] == ("Ann Lee: She led Society Y until 1950.",)
    assert labels[(3, 5)] == ("São Paulo: São Paulo, Brazil is a city.",)
    assert list(graph.incidences_of(1)) == [3, 4]


def test_paraphrased_entity_takes_the_most_overlapping_sentence():
    (label,) = SentenceDescriber().describe(PASSAGES[1], ["president ann"])
    assert label == ("Society Y: Its first president was Ann Lee.",)
    (label,) = SentenceDescriber(with_title=False).describe(PASSAGES[1], ["unrelated"])
    assert label == ("Society Y is an association.",)  # nothing in common: the first sentence
    (label,) = SentenceDescriber(max_descriptions=3).describe(PASSAGES[2], ["ann lee"])
    assert label == ("Ann Lee: Ann Lee (born 1901) was a psychologist.",)


@pytest.mark.parametrize("split", [1, 2, 3])
def test_adding_passages_equals_building_from_scratch(split):
    scratch = Hypergraph(["ann lee"])
    scratch.add_passages(PASSAGES, MENTIONS, SentenceDescriber())
    describer = CountingDescriber()
    grown = Hypergraph(["ann lee"])
    grown.add_passages(PASSAGES[:split], MENTIONS[:split], describer)
    weights_before = grown.incidence_weights()
    labels_before = list(grown.labels)
    new = grown.add_passages(PASSAGES[split:], MENTIONS[split:], describer)
    assert list(new) == list(range(split, len(PASSAGES)))
    assert describer.described == [p.id for p in PASSAGES]  # every passage described once, old ones not again
    assert grown.labels[: len(labels_before)] == labels_before
    for attr in ("passage_ids", "entities", "labels"):
        assert getattr(grown, attr) == getattr(scratch, attr)
    assert np.array_equal(grown.incidence_passage, scratch.incidence_passage)
    assert np.array_equal(grown.incidence_entity, scratch.incidence_entity)
    assert (grown.incidence_matrix() != scratch.incidence_matrix()).nnz == 0
    # joining a hyperedge lowers the weight of its old incidences: weights follow the current |e|
    assert np.all(grown.incidence_weights()[: len(weights_before)] <= weights_before)


def test_duplicate_passages_and_bad_describers_are_refused():
    graph = Hypergraph()
    graph.add_passages(PASSAGES[:1], MENTIONS[:1], SentenceDescriber())
    with pytest.raises(ValueError, match="already in the hypergraph"):
        graph.add_passages(PASSAGES[:1], MENTIONS[:1], SentenceDescriber())

    class Empty(SentenceDescriber):
        name = "empty"

        def describe(self, passage, entities):
            return [() for _ in entities]

    with pytest.raises(ValueError, match="1-3 descriptions"):
        graph.add_passages(PASSAGES[1:2], MENTIONS[1:2], Empty())


def test_from_index_keeps_index_entity_ids(kg):
    corpus = Corpus(PASSAGES)
    index = kg([(0, 0, 1)], num_entities=4, passages=[[0, 1], [1, 3], [3], []], passage_ids=corpus.ids)
    graph = Hypergraph.from_index(index, corpus)
    assert graph.entities == index.entities and graph.passage_ids == index.passage_ids
    assert (graph.incidence_matrix() > 0).toarray().tolist() == (index.passage_entities > 0).toarray().tolist()
    assert graph.edge_sizes().tolist() == index.entity_passage_count.astype(int).tolist()
    partial = Hypergraph.from_index(index, corpus, limit=2)
    partial.add_passages(index_passages(index, corpus, [2, 3]), index_mentions(index, [2, 3]), SentenceDescriber())
    assert partial.labels == graph.labels and np.array_equal(partial.incidence_entity, graph.incidence_entity)
