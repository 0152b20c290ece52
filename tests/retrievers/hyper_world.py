"""The five-passage world of the HyperAddress steering and cost tests: a three-hop chain and a distractor."""

from glmrag.data.types import Corpus, Passage
from glmrag.index.synthetic import build_kg

CORPUS = Corpus(
    [
        Passage.make("Journal X", "The Journal X is published by the Psychological Society."),
        Passage.make("Psychological Society", "Its first president was Ann Lee, a psychologist."),
        Passage.make("Ann Lee", "Ann Lee was born in Boston in 1901."),
        Passage.make("Boston", "Boston is the capital of Massachusetts."),
        Passage.make("Volcano", "Mount Etna is an active volcano on Sicily, near Boston."),
    ]
)
MENTIONS = [
    ["journal x", "psychological society"],
    ["psychological society", "ann lee"],
    ["ann lee", "boston"],
    ["boston", "massachusetts"],
    ["mount etna", "sicily", "boston"],
]
NAMES = list(dict.fromkeys(m for ms in MENTIONS for m in ms))


def world_index():
    """A fresh KG index of :data:`CORPUS`: each passage mentions its :data:`MENTIONS`, entities named :data:`NAMES`."""
    kg = build_kg([], len(NAMES), [[NAMES.index(m) for m in ms] for ms in MENTIONS], passage_ids=CORPUS.ids)
    kg.entities[:] = NAMES
    return kg
