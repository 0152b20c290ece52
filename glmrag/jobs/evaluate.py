"""The evaluation job: dataset -> cached KG index -> retrievers -> (QA reader) -> evaluator -> reports.

This is the one place that wires the layers together from a Hydra config
(``configs/eval.yaml``); ``eval.py`` is a thin wrapper around :func:`run_eval`.

With ``qa=true`` every system also answers its questions (GLM-RAG §4.3, App. E): a retriever that
answers itself (:class:`~glmrag.retrievers.base.AnsweringRetriever`) keeps its answers, every other
one's top passages go to the reader (``cfg.reader``, a :class:`~glmrag.qa.QAReader`), and the
evaluator adds EM/F1. The QA baselines of ``cfg.qa_baselines`` have no ranking, so they are scored
apart (``settings.qa_baselines``). Whenever an LLM was used, each system's LLM cost per question
(its retriever's, :class:`~glmrag.retrievers.base.LLMCostedRetriever`, plus the reader's) goes into
``per_question.jsonl`` (``llm_*`` columns) and its mean into ``settings.llm_cost``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from glmrag.data.files import register_data
from glmrag.data.registry import load_dataset
from glmrag.data.types import Corpus, Question
from glmrag.eval import EvalResult, evaluate, format_markdown, write_outputs
from glmrag.eval.llm_failures import GuardedRetrieval, failure_summary
from glmrag.eval.metrics import qa_metrics
from glmrag.eval.outputs import RANKINGS_FILE, RankingLog, cost_columns
from glmrag.eval.overlap import choose_split, seen_questions
from glmrag.eval.significance import Interval, bootstrap_ci
from glmrag.eval.store import run_record, write_run
from glmrag.eval.timing import timed_retrieve
from glmrag.eval.traces import add_traces
from glmrag.index.cache import get_index
from glmrag.index.embed import Embedder
from glmrag.index.kg import KGIndex
from glmrag.io import check_room, children_die_with_parent
from glmrag.jobs import config_path  # noqa: F401  (registers ${glmrag_overrides:}, used by the run names)
from glmrag.jobs.config_check import validate_eval_config
from glmrag.llm.base import COST_FIELDS, LLMBudgetExceeded, Usage, failure_budget
from glmrag.qa import ANSWER_FALLBACK, QAReader, baseline_contexts
from glmrag.qa.accuracy import LLMJudge, add_judged_accuracy
from glmrag.retrievers.base import AnsweringRetriever, LLMCostedRetriever, Ranking, Retriever

log = logging.getLogger(__name__)


def make_retrievers(cfg: DictConfig) -> dict[str, Retriever]:
    """One retriever per entry of ``cfg.retriever``, named by its key (``dense``, ``ppr``, ...)."""
    retrievers = {name: hydra.utils.instantiate(node) for name, node in cfg.items()}
    for name, r in retrievers.items():
        if not isinstance(r, Retriever):
            raise TypeError(
                f"retriever {name} ({type(r).__name__}) does not implement glmrag.retrievers.base.Retriever"
            )
    return retrievers


def reader_tag(system: str) -> str:
    """The usage tag of the reader's calls for ``system`` (a retriever or a QA baseline)."""
    return f"qa:{system}"


def make_reader(cfg: DictConfig) -> QAReader:
    """The QA reader of ``cfg.reader`` with its LLM; built only when ``qa`` is true (loading a model is slow)."""
    reader = hydra.utils.instantiate(cfg)
    if not isinstance(reader, QAReader):
        raise TypeError(f"cfg.reader built a {type(reader).__name__}; its _target_ must be glmrag.qa.QAReader")
    return reader


def answer_systems(
    reader: QAReader,
    retrievers: Mapping[str, Retriever],
    rankings: Mapping[str, Sequence[Ranking]],
    questions: Sequence[Question],
    corpus: Corpus,
) -> dict[str, dict[str, str]]:
    """System -> question id -> answer: an answering retriever's own answers, the reader's for every other."""
    answers: dict[str, dict[str, str]] = {}
    for name, retriever in retrievers.items():
        if isinstance(retriever, AnsweringRetriever):
            missing = [q.id for q in questions if q.id not in retriever.answers]
            if missing:
                raise ValueError(
                    f"retriever {name} answers its questions but has no answer for {len(missing)} of them "
                    f"(e.g. {missing[:3]}); its retrieve() must set answers[question_id] for every question"
                )
            answers[name] = {q.id: retriever.answers[q.id] for q in questions}
        else:
            answers[name] = reader.read(questions, rankings[name], corpus, tag=reader_tag(name))
        log.info("%s: answered %d questions", name, len(answers[name]))
    return answers


def answer_baselines(
    reader: QAReader, names: Sequence[str], questions: Sequence[Question], index: KGIndex, subgraph: Mapping
) -> dict[str, dict[str, str]]:
    """Baseline -> question id -> the reader's answer without a ranking (GLM-RAG §5.1 e, App. E Table 8)."""
    answers: dict[str, dict[str, str]] = {}
    for name in names:
        contexts = baseline_contexts(name, questions, index, **subgraph)
        answers[name] = reader.answer(questions, contexts, tag=reader_tag(name))
        log.info("%s baseline: answered %d questions", name, len(answers[name]))
    return answers


def baseline_scores(
    answers: Mapping[str, Mapping[str, str]], questions: Sequence[Question], n_boot: int, seed: int
) -> dict[str, dict[str, Interval]]:
    """Baseline -> EM and F1 with the bootstrap CIs the evaluator gives the systems (same n, seed: paired)."""
    out: dict[str, dict[str, Interval]] = {}
    for name, by_id in answers.items():
        scores = [qa_metrics(by_id[q.id], q.answers) for q in questions]
        out[name] = {m: bootstrap_ci([s[m] for s in scores], n_boot, seed) for m in ("em", "f1")}
    return out


def llm_costs(
    systems: Sequence[str],
    retrievers: Mapping[str, Retriever],
    reader: QAReader | None,
    questions: Sequence[Question],
) -> dict[str, list[dict[str, Usage]]]:
    """System -> per question (question order) ``{"retriever": Usage, "reader": Usage}``.

    A retriever's part is its :meth:`~glmrag.retrievers.base.LLMCostedRetriever.llm_cost` (zero for one
    that calls no LLM, and for a QA baseline); the reader's part is what it spent under the system's tag.
    """
    out: dict[str, list[dict[str, Usage]]] = {}
    for system in systems:
        retriever = retrievers.get(system)
        own = retriever.llm_cost() if isinstance(retriever, LLMCostedRetriever) else {}
        read = reader.llm.usage.by_question(reader_tag(system)) if reader is not None else {}
        out[system] = [
            {"retriever": Usage().add(own.get(q.id, Usage())), "reader": Usage().add(read.get(q.id, Usage()))}
            for q in questions
        ]
    return out


def mean_costs(costs: Mapping[str, list[dict[str, Usage]]]) -> dict[str, dict[str, dict[str, float]]]:
    """System -> ``retriever`` / ``reader`` / ``total`` -> mean per question of each of :data:`COST_FIELDS`."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for system, rows in costs.items():
        parts = {part: [row[part].cost() for row in rows] for part in ("retriever", "reader")}
        parts["total"] = [Usage().add(row["retriever"]).add(row["reader"]).cost() for row in rows]
        out[system] = {
            part: {f: sum(v[f] for v in values) / max(len(values), 1) for f in COST_FIELDS}
            for part, values in parts.items()
        }
    return out


def add_qa_and_cost_columns(
    result: EvalResult,
    answers: Mapping[str, Mapping[str, str]] | None,
    costs: Mapping[str, list[dict[str, Usage]]],
) -> None:
    """Give each per-question row its ``prediction`` (when answered) and total ``llm_*`` cost, in place."""
    for system, rows in result.per_question.items():
        for i, row in enumerate(rows):
            if answers is not None:
                row["prediction"] = answers[system][row["question_id"]]
            if system in costs:
                total = Usage().add(costs[system][i]["retriever"]).add(costs[system][i]["reader"])
                row.update(zip(cost_columns(), total.cost().values(), strict=True))


def run_eval(cfg: DictConfig) -> EvalResult:
    """Rank the questions of ``cfg.data`` with every retriever in ``cfg.retriever`` and evaluate them together;
    with ``cfg.qa`` also answer them with ``cfg.reader`` and score the answers and the ``cfg.qa_baselines``.

    The config is checked first (:func:`~glmrag.jobs.config_check.validate_eval_config`). A question whose LLM
    calls fail is scored as failed and counted (``settings.llm_failures``); once more than
    ``cfg.max_llm_failures`` calls failed, the rest is scored as failed, the outputs are written, and
    :class:`~glmrag.llm.base.LLMBudgetExceeded` is raised.
    """
    validate_eval_config(cfg)
    check_room(cfg.output_dir, "output_dir")  # a full disk fails now, not after every system has run
    check_room(cfg.index.cache_dir, "the index cache")
    register_data(cfg.data)  # data=files: the user's own files become dataset cfg.data.name
    children_die_with_parent()  # spaCy / DataLoader workers must not outlive a killed job
    with failure_budget(cfg.get("max_llm_failures")) as budget:
        result = _run_eval(cfg)
    if budget.exceeded:
        raise LLMBudgetExceeded(
            f"{budget.failures} LLM calls failed, more than max_llm_failures={budget.max_failures}; the questions "
            f"after that were scored as failed; outputs of what finished are in {cfg.output_dir}"
        )
    return result


def _run_eval(cfg: DictConfig) -> EvalResult:
    full = load_dataset(cfg.data.name, root=cfg.data.root)
    # a checkpoint is scored on the questions it did not train on (glmrag/eval/overlap.py)
    split, overlap = choose_split(cfg.data.name, cfg.data.split, cfg.retriever, cfg.get("allow_train_overlap", False))
    dataset = load_dataset(cfg.data.name, split=split, limit=cfg.data.limit, root=cfg.data.root)
    log.info(
        "%s: %d questions, %d passages; %s",
        dataset.name,
        len(dataset.qa),
        len(dataset.corpus),
        dataset.report.summary(),
    )
    questions = list(dataset.qa)
    overlap |= seen_questions(questions, cfg.retriever, cfg.get("allow_train_overlap", False))
    index = get_index(full, cfg.index)

    retrievers = make_retrievers(cfg.retriever)
    rankings: dict[str, list[Ranking]] = {}
    failed: dict[str, list[str]] = {}
    ms_per_question: dict[str, float] = {}
    # top_k null: every passage is ranked, so MRR is the reciprocal rank in the full ranking
    depth = len(dataset.corpus) if cfg.top_k is None else cfg.top_k
    setup_seconds: dict[str, float | None] = {}
    log_rankings = RankingLog(Path(cfg.output_dir) / RANKINGS_FILE, keep=max(cfg.ks))
    for name, retriever in retrievers.items():
        guarded = GuardedRetrieval(name, retriever, index, dataset.corpus, depth)
        rankings[name], setup_seconds[name], ms_per_question[name] = timed_retrieve(
            retriever, questions, index, dataset.corpus, depth, run=guarded
        )
        failed[name] = guarded.failed
        log_rankings.append(name, rankings[name])  # kept if anything later fails (a full disk, a crash)
        setup = "not separated" if setup_seconds[name] is None else f"{setup_seconds[name]:.1f} s"
        log.info("%s: setup %s, %.1f ms per question", name, setup, ms_per_question[name])

    reader: QAReader | None = None
    answers: dict[str, dict[str, str]] | None = None
    baselines: dict[str, dict[str, str]] = {}
    if cfg.qa:
        names = list(cfg.qa_baselines or [])
        clash = sorted(set(names) & set(retrievers))
        if clash:
            raise ValueError(f"qa_baselines {clash} share a name with a retriever; rename the retriever key")
        reader = make_reader(cfg.reader)
        answers = answer_systems(reader, retrievers, rankings, questions, dataset.corpus)
        baselines = answer_baselines(reader, names, questions, index, cfg.qa_subgraph)

    question_embeddings = None
    if index.entity_embeddings is not None and cfg.index.embed_model:
        question_embeddings = Embedder(cfg.index.embed_model).encode([q.question for q in questions])
    result = evaluate(
        rankings,
        questions,
        index,
        ks=tuple(cfg.ks),
        reference=cfg.reference or next(iter(rankings)),
        question_embeddings=question_embeddings,
        n_boot=cfg.n_boot,
        seed=cfg.seed,
        answers_by_system=answers,
    )
    # warm wall time of retrieve() per question, one-off setup apart (glmrag/eval/timing.py; GLM-RAG
    # Table 7 measures it on a GPU: benchmarks/gpu_gnn.py, benchmarks/gpu_glm.py)
    result.settings["ms_per_question"] = ms_per_question
    result.settings["setup_seconds"] = setup_seconds
    result.settings["data_split"] = split
    if overlap:
        result.settings["train_overlap"] = overlap
    costs: dict[str, list[dict[str, Usage]]] = {}
    if reader is not None or any(isinstance(r, LLMCostedRetriever) for r in retrievers.values()):
        costs = llm_costs([*retrievers, *baselines], retrievers, reader, questions)
        result.settings["llm_cost"] = mean_costs(costs)
    add_qa_and_cost_columns(result, answers, costs)
    result.settings["llm_failures"] = failure_summary(failed, costs)
    add_traces(result, retrievers)  # what each LLM method decided per question; its summary and index cost
    if reader is not None and cfg.get("qa_judge", False):  # ACC by an LLM judge, labelled as such (DTKG §4.1)
        result.settings["acc_llm_judge"] = add_judged_accuracy(result.per_question, questions, LLMJudge(reader.llm))
    if reader is not None:
        by_method = reader.llm.usage.by_method()
        read = [s for s in [*retrievers, *baselines] if not isinstance(retrievers.get(s), AnsweringRetriever)]
        result.settings["qa"] = reader.settings() | {
            "baselines": list(baselines),
            "subgraph": OmegaConf.to_container(cfg.qa_subgraph, resolve=True),
            "answered_by_retriever": [s for s in retrievers if s not in read],
            # answers taken from a response without "Answer: ..." (glmrag.qa.reader.parse_answer)
            "answer_fallbacks": {s: by_method.get(reader_tag(s), Usage()).events.get(ANSWER_FALLBACK, 0) for s in read},
        }
        result.settings["qa_baselines"] = baseline_scores(baselines, questions, cfg.n_boot, cfg.seed)
    result.settings["config"] = OmegaConf.to_container(cfg, resolve=True)
    print(format_markdown(result))  # first: the table is on the screen even when the disk is full
    paths = write_outputs(result, cfg.output_dir)
    print(f"\nwritten: {', '.join(str(p) for p in paths.values())}")
    return result


def hydra_overrides() -> list[str]:
    """The command-line overrides of this Hydra job (a multirun job's include its swept values); [] outside Hydra."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def resolved_config_yaml(cfg: DictConfig) -> str:
    """``cfg`` without its ``hydra`` node, interpolations resolved, as YAML.

    Resolved through ``cfg`` itself, not a copy, so cached resolvers keep the values the run used
    (``${now:...}`` in ``checkpoint_dir`` is the time the run started, not the time of writing).
    """
    nodes = {key: cfg[key] for key in cfg if key != "hydra"}
    return OmegaConf.to_yaml(
        {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in nodes.items()}
    )


def store_eval_run(cfg: DictConfig, result: EvalResult) -> Path:
    """File an ``eval.py`` run in the results store (``cfg.results_dir``); returns its folder."""
    run = {
        "study": cfg.study,
        "run_name": cfg.run_name,
        "family": result.reference,
        "eval_data": cfg.data.name,
        "output_dir": str(cfg.output_dir),
        "settings": {"data.name": cfg.data.name, "data.split": cfg.data.split, "data.limit": cfg.data.limit},
        "overrides": hydra_overrides(),
    }
    path = write_run(cfg.results_dir, cfg.run_name, run_record(result, run), resolved_config_yaml(cfg))
    log.info("stored in %s", path)
    return path
