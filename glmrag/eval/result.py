"""The evaluator's result: plain data that :func:`~glmrag.eval.evaluator.evaluate` fills and
:mod:`glmrag.eval.outputs`, :mod:`glmrag.eval.store` and :mod:`glmrag.eval.traces` read (a module of its own,
so that those readers need not import the evaluator that imports them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from glmrag.eval.significance import Comparison, Interval


@dataclass
class EvalResult:
    """Everything :func:`evaluate` measured; plain data, written by :mod:`glmrag.eval.outputs`."""

    systems: list[str]
    reference: str | None
    ks: tuple[int, ...]
    question_ids: list[str]
    """All questions, in the order given."""
    per_question: dict[str, list[dict]]
    """System -> one row per question (question order): ids, top passages, buckets, metrics (None = undefined)."""
    overall: dict[str, dict[str, Interval]]
    """System -> metric -> mean with 95% paired bootstrap CI over the questions where it is defined."""
    breakdowns: dict[str, dict[str, dict[str, dict]]]
    """Grouping -> system -> bucket -> {"n": size, metric: mean}, over questions with gold passages."""
    significance: list[Comparison]
    """Paired tests of each system vs the reference, Holm-corrected (empty without a reference)."""
    counts: dict[str, int]
    """``questions``, ``evaluated`` (with gold passages) and ``excluded_no_gold``."""
    metric_names: list[str]
    """Metrics present, in report order."""
    settings: dict = field(default_factory=dict)
    """n_boot, seed, level, test, tested metrics, entity_k: what a reader needs to reproduce the numbers."""
