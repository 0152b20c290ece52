"""The evaluator's result, plain typed data: :func:`~glmrag.eval.evaluator.evaluate` fills it, the evaluation
job adds what it measured around it (timing, LLM cost, QA), and :mod:`glmrag.eval.outputs`,
:mod:`glmrag.eval.store` and :mod:`glmrag.eval.traces` read it (a module of its own, so those readers need
not import the evaluator).

``metrics.json`` keeps a flat ``settings`` object, which :meth:`EvalResult.settings_json` writes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from glmrag.eval.significance import LEVEL, MIN_PAIRED, Comparison, Interval


@dataclass
class EvalSettings:
    """How the evaluator computed its numbers: what a reader needs to reproduce them."""

    n_boot: int | None = None
    seed: int = 0
    level: float = LEVEL
    """Confidence level of the bootstrap CIs."""
    test: str = "bootstrap"
    """The paired test against the reference: ``bootstrap`` (GLM-RAG App. H) or ``permutation``."""
    tested_metrics: list[str] = field(default_factory=list)
    correction: str = "holm-bonferroni"
    min_paired: int = MIN_PAIRED
    """Fewest paired questions a metric is tested on."""
    untested_metrics: dict[str, int] = field(default_factory=dict)
    """Tested metric -> paired questions, for those with fewer than ``min_paired`` (no test, no marker)."""
    entity_k: int | None = None
    """Top-k retrieved entities of the analysis measures (GLM-RAG §6)."""
    bfs_cutoff: int | None = None
    density_hops: int | None = None


JOB_FIELDS = (
    "ms_per_question",
    "setup_seconds",
    "data_split",
    "train_overlap",
    "overlap_unchecked",
    "ranking_depth",
    "llm_cost",
    "llm_failures",
    "method_summary",
    "index_llm_cost",
    "acc_llm_judge",
    "qa",
    "qa_baselines",
    "config",
)
"""The fields the evaluation job (not the evaluator) fills; ``metrics.json`` has them in ``settings`` when set."""


@dataclass
class EvalResult:
    """Everything :func:`evaluate` measured, and what the evaluation job measured around it."""

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
    settings: EvalSettings = field(default_factory=EvalSettings)
    warnings: list[str] = field(default_factory=list)
    """Lines printed above the table in ``results.md`` and kept in ``metrics.json`` (a model no better than
    before training, from the training job)."""

    # -- filled by the evaluation job (glmrag.jobs.evaluate, glmrag.api) --
    ms_per_question: dict[str, float] = field(default_factory=dict)
    """System -> warm wall time of ``retrieve()`` per question, one-off setup apart (glmrag/eval/timing.py)."""
    setup_seconds: dict[str, float | None] | None = None
    """System -> seconds of its first call's setup; None per system where it was not separated."""
    data_split: str | None = None
    """The split the questions came from (``choose_split`` may pick it for a checkpoint)."""
    train_overlap: dict[str, str] = field(default_factory=dict)
    """System -> how many of these questions it trained or validated on ("13 of these 16 questions")."""
    overlap_unchecked: dict[str, str] = field(default_factory=dict)
    """System -> why its checkpoint could not be checked (fully) for questions it trained on."""
    ranking_depth: int | None = None
    """Passages ranked per question when the rankings were cut (``top_k``); None: every passage was ranked, so
    MRR is the reciprocal rank in the full ranking. A cut MRR is labelled ``MRR@k`` in the table."""
    llm_cost: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """System -> ``retriever`` / ``reader`` / ``total`` -> mean per question of each cost field."""
    llm_failures: dict[str, dict] = field(default_factory=dict)
    """System -> failed questions and LLM failures / retries (glmrag/eval/llm_failures.py)."""
    method_summary: dict[str, dict] = field(default_factory=dict)
    """System -> a traced method's ``trace_summary()`` (glmrag/eval/traces.py)."""
    index_llm_cost: dict[str, dict[str, dict]] = field(default_factory=dict)
    """System -> tag -> the LLM cost of once-per-corpus work."""
    acc_llm_judge: dict[str, dict] = field(default_factory=dict)
    """System -> ACC by an LLM judge (``label``, ``mean``, ``judged``, ``unreadable``)."""
    qa: dict[str, Any] | None = None
    """The reader's settings, the QA baselines and answer fallbacks; None when nothing was answered."""
    qa_baselines: dict[str, dict[str, Interval]] = field(default_factory=dict)
    """QA baseline -> EM / F1 with CIs (GLM-RAG §5.1 e, Table 8)."""
    config: dict[str, Any] = field(default_factory=dict)
    """The evaluation job's resolved config."""

    def settings_json(self) -> dict[str, Any]:
        """``metrics.json``'s ``settings``: the evaluator's settings and every job field that is set."""
        job = {name: getattr(self, name) for name in JOB_FIELDS}
        return asdict(self.settings) | {k: v for k, v in job.items() if v is not None and v != {}}
