import pytest

from glmrag.data.types import Corpus, Passage
from glmrag.index.extractors import SpacyExtractor, load_nlp, mention_spans
from glmrag.index.normalize import normalize_phrase

SUDHOF = Passage.make(
    "Thomas Südhof",
    "Thomas Sudhof is a professor at Stanford University. He was born in Göttingen and was awarded "
    "the Nobel Prize by the Karolinska Institute.",
)
JOURNAL = Passage.make(
    "Journal of Mathematical Physics",
    "The Journal of Mathematical Physics was published by the American Institute of Physics. "
    "Its editor, Jan Philip Solovej, works in Copenhagen and directed three films.",
)


def _normalised(ex):
    entities = {normalize_phrase(e) for e in ex.entities}
    triples = {tuple(normalize_phrase(p) for p in t) for t in ex.triples}
    return entities, triples


@pytest.fixture(scope="module")
def extracted():
    extractor = SpacyExtractor()
    return extractor, extractor.extract(Corpus([SUDHOF, JOURNAL]))


def test_entities_and_subject_verb_object_triples(extracted):
    _, (sudhof, journal) = extracted
    entities, triples = _normalised(sudhof)
    assert {"thomas sudhof", "stanford university", "göttingen", "nobel prize", "karolinska institute"} <= entities
    assert ("thomas sudhof", "is professor at", "stanford university") in triples
    assert ("thomas sudhof", "is", "professor") in triples
    entities, triples = _normalised(journal)
    assert ("journal of mathematical physics", "was published by", "american institute of physics") in triples


def test_title_is_an_entity_and_subject_pronouns_resolve_to_it(extracted):
    extractor, (sudhof, _) = extracted
    entities, triples = _normalised(sudhof)
    assert "thomas südhof" in entities
    assert ("thomas südhof", "was born in", "göttingen") in triples
    # a conjoined verb without its own subject takes the first verb's ("... and was awarded the Nobel Prize")
    assert ("thomas südhof", "was awarded", "nobel prize") in triples
    assert ("thomas südhof", "was awarded by", "karolinska institute") in triples
    assert extractor.report["pronoun_subjects"] >= 1


def test_appositions_numbers_and_determiners(extracted):
    _, (_, journal) = extracted
    entities, triples = _normalised(journal)
    assert ("jan philip solovej", "works in", "copenhagen") in triples  # "Its editor, Jan Philip Solovej, works"
    assert "films" in entities and "three" not in entities and "three films" not in entities
    assert not any(e.startswith("the ") for e in entities)


def test_same_sentence_pairs_and_report(extracted):
    extractor, (sudhof, journal) = extracted
    _, triples = _normalised(sudhof)
    # no dependency rule joins the two objects; the verb that governs both names the pair
    assert ("göttingen", "born", "nobel prize") in triples
    assert extractor.report["passages"] == 2
    assert extractor.report["sentences"] == 4
    assert extractor.report["dependency_triples"] + extractor.report["pair_triples"] == len(sudhof.triples) + len(
        journal.triples
    )


def test_pair_window_zero_keeps_only_dependency_triples():
    extractor = SpacyExtractor(pair_window=0)
    extractor.extract(Corpus([SUDHOF]))
    assert extractor.report["pair_triples"] == 0
    assert extractor.report["dependency_triples"] > 0


def test_settings_describe_the_output_only():
    a, b = SpacyExtractor(batch_size=8, n_process=1), SpacyExtractor(batch_size=128)
    assert a.settings() == b.settings()
    assert "CARDINAL" in a.settings()["skip_labels"]
    assert SpacyExtractor(pair_window=1).settings() != a.settings()
    with pytest.raises(ValueError, match="pair_window"):
        SpacyExtractor(pair_window=-1)


def test_mention_spans_of_a_question():
    doc = load_nlp()("Which film directed by the Coen brothers won the Academy Award in 1997?")
    mentions = [s.text for s in mention_spans(doc)]
    assert "film" in mentions
    assert any("Coen" in m for m in mentions)
    assert not any(m.lower().startswith(("which", "the ")) for m in mentions)
