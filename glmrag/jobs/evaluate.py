"""The evaluation job (``eval.py``): dataset -> cached KG index -> retrievers -> (QA reader) -> evaluator -> reports.

:func:`run_eval` runs the stages of ``configs/eval.yaml`` in order: :func:`load_questions`, :func:`rank_all`,
:func:`answer_all` (with ``qa=true``: the reader answers from each system's top passages, GLM-RAG §4.3, App. E),
:func:`score`, :func:`add_llm_fields` (LLM cost per question, failures, traces), then the table and the files.
The training job hands its best checkpoint to :func:`run_eval` in a config composed from the same file.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from glmrag.data.files import register_data
from glmrag.data.registry import load_dataset
from glmrag.data.types import Corpus, Dataset, Question
from glmrag.eval import EvalResult, evaluate, write_outputs
from glmrag.eval.llm_failures import GuardedRetrieval, failure_summary
from glmrag.eval.metrics import qa_metrics
from glmrag.eval.outputs import RANKINGS_FILE, RankingLog, cost_columns, format_console, fresh_output_dir
from glmrag.eval.overlap import choose_split, seen_questions
from glmrag.eval.significance import Interval, bootstrap_ci
from glmrag.eval.store import run_record, write_run
from glmrag.eval.study_plots import evaluation_figures
from glmrag.eval.timing import timed_retrieve
from glmrag.eval.traces import add_traces
from glmrag.index.cache import get_index
from glmrag.index.embed import Embedder
from glmrag.index.kg import KGIndex
from glmrag.io import check_room, children_die_with_parent
from glmrag.jobs.common import checkpoint_run_name, hydra_overrides, resolved_config_yaml
from glmrag.jobs.config_check import validate_eval_config
from glmrag.llm.base import COST_FIELDS, LLMBudgetExceeded, Usage, failure_budget
from glmrag.progress import stage_progress
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


def run_eval(cfg: DictConfig, warnings: Sequence[str] = (), figures: bool = False) -> EvalResult:
    """Rank the questions of ``cfg.data`` with every retriever in ``cfg.retriever`` and evaluate them together;
    with ``cfg.qa`` also answer them with ``cfg.reader`` and score the answers and the ``cfg.qa_baselines``.

    The config and every folder the run writes are checked first
    (:func:`~glmrag.jobs.config_check.validate_eval_config`, :func:`~glmrag.io.check_room`). ``warnings`` go
    above the table (the training job's "no better than before training"); ``figures`` adds the recall figures
    (:func:`~glmrag.eval.study_plots.evaluation_figures`). The outputs go to ``cfg.output_dir``, a folder of this run's
    own (:func:`~glmrag.eval.outputs.fresh_output_dir`): each file is written once, whole. A question whose LLM
    calls fail is scored as failed and counted (``result.llm_failures``); once more than ``cfg.max_llm_failures``
    calls failed, the rest is scored as failed, the outputs are written, and
    :class:`~glmrag.llm.base.LLMBudgetExceeded` is raised.
    """
    validate_eval_config(cfg)
    if cfg.get("results_dir"):
        check_room(cfg.results_dir, "results_dir", create=False)
    output_dir = fresh_output_dir(cfg.output_dir)
    check_room(output_dir, "output_dir")  # a full disk fails now, not after every system has run
    check_room(cfg.index.cache_dir, "the index cache")
    register_data(cfg.data)  # data=files: the user's own files become dataset cfg.data.name
    children_die_with_parent()  # spaCy / DataLoader workers must not outlive a killed job
    cfg = with_system_names(cfg)
    with failure_budget(cfg.get("max_llm_failures")) as budget:
        result = _run_eval(cfg, list(warnings), output_dir)
        print(format_console(result))  # first: the table is on the screen even when the disk is full
        written = [output_dir / RANKINGS_FILE, *write_outputs(result, output_dir).values()]
        if figures:
            written += evaluation_figures(result, output_dir).values()
    print(f"\nwritten: {', '.join(str(p) for p in written)}")
    if budget.exceeded:
        raise LLMBudgetExceeded(
            f"{budget.failures} LLM calls failed, more than max_llm_failures={budget.max_failures}; the questions "
            f"after that were scored as failed; outputs of what finished are in {cfg.output_dir}"
        )
    return result


GENERIC_CHECKPOINT = "checkpoint"
"""The key of ``configs/retriever/checkpoint.yaml``: a system of that name is renamed after its run."""


def checkpoint_name(ckpt_path: str) -> str:
    """The run a checkpoint of ``train.py`` belongs to (saved in it), else the file's stem."""
    return checkpoint_run_name(ckpt_path) or Path(ckpt_path).stem


def system_names(retrievers: Mapping[str, Any]) -> dict[str, str]:
    """Retriever key -> its name in the tables: the key, but the generic ``checkpoint`` named by its run
    (:func:`checkpoint_name`; ``<run>/<file stem>`` when another system has that name)."""
    names = {key: key for key in retrievers}
    node = retrievers.get(GENERIC_CHECKPOINT)
    if node is not None and node.get("ckpt_path"):
        name = checkpoint_name(str(node["ckpt_path"]))
        if name in names:
            name = f"{name}/{Path(str(node['ckpt_path'])).stem}"
        names[GENERIC_CHECKPOINT] = name
    return names


def with_system_names(cfg: DictConfig) -> DictConfig:
    """``cfg`` with ``retriever`` keyed by :func:`system_names` (and ``reference`` to match); ``cfg`` itself as it
    is when no key changes."""
    names = system_names(cfg.retriever)
    if all(key == name for key, name in names.items()):
        return cfg
    renamed = copy.deepcopy(cfg)
    renamed.retriever = {names[key]: node for key, node in cfg.retriever.items()}
    if cfg.get("reference") in names:
        renamed.reference = names[cfg.reference]
    log.info("systems named %s", ", ".join(f"{k} -> {v}" for k, v in names.items() if k != v))
    return renamed


@dataclass
class Ranked:
    """The retrieval stage's output: each system's rankings and what was measured while ranking."""

    rankings: dict[str, list[Ranking]] = field(default_factory=dict)
    failed: dict[str, list[str]] = field(default_factory=dict)
    """System -> questions whose retrieval failed (scored as failed)."""
    setup_seconds: dict[str, float | None] = field(default_factory=dict)
    ms_per_question: dict[str, float] = field(default_factory=dict)


@dataclass
class Answered:
    """The QA stage's output (empty without ``qa``): the reader and the answers of the systems and baselines."""

    reader: QAReader | None = None
    answers: dict[str, dict[str, str]] | None = None
    baselines: dict[str, dict[str, str]] = field(default_factory=dict)


def _run_eval(cfg: DictConfig, warnings: list[str], output_dir: Path) -> EvalResult:
    """The evaluation of :func:`run_eval`, its rankings logged into ``output_dir`` as each system finishes."""
    dataset, questions, split, overlap, unchecked = load_questions(cfg)
    index = get_index(load_dataset(cfg.data.name, root=cfg.data.root), cfg.index)
    retrievers = make_retrievers(cfg.retriever)
    ranked = rank_all(cfg, retrievers, questions, index, dataset.corpus, output_dir / RANKINGS_FILE)
    answered = answer_all(cfg, retrievers, ranked.rankings, questions, index, dataset.corpus)
    result = score(cfg, ranked.rankings, questions, index, answered.answers)
    result.warnings = [*warnings, *result.warnings]  # the job's, then the evaluator's (unranked systems)
    result.ms_per_question, result.setup_seconds = ranked.ms_per_question, ranked.setup_seconds
    result.data_split, result.train_overlap, result.overlap_unchecked = split, overlap, unchecked
    result.ranking_depth = None if cfg.top_k is None or cfg.top_k >= len(dataset.corpus) else cfg.top_k
    add_llm_fields(result, cfg, retrievers, questions, ranked, answered)
    result.config = OmegaConf.to_container(cfg, resolve=True)
    return result


def load_questions(
    cfg: DictConfig,
) -> tuple[Dataset, list[Question], str | None, dict[str, str], dict[str, str]]:
    """The dataset of ``cfg.data``, its questions, the split they come from, system -> the questions it
    trained on (empty unless ``allow_train_overlap``: a checkpoint is scored on questions it did not see,
    glmrag/eval/overlap.py), and system -> why its checkpoint could not be checked (refused with
    ``strict_overlap``)."""
    allow = cfg.get("allow_train_overlap", False)
    split, overlap = choose_split(cfg.data.name, cfg.data.split, cfg.retriever, allow)
    dataset = load_dataset(cfg.data.name, split=split, limit=cfg.data.limit, root=cfg.data.root)
    log.info(
        "%s: %d questions, %d passages; %s",
        dataset.name,
        len(dataset.qa),
        len(dataset.corpus),
        dataset.report.summary(),
    )
    questions = list(dataset.qa)
    found, unchecked = seen_questions(questions, cfg.retriever, allow, cfg.get("strict_overlap", False))
    return dataset, questions, split, overlap | found, unchecked


def rank_all(
    cfg: DictConfig,
    retrievers: Mapping[str, Retriever],
    questions: list[Question],
    index: KGIndex,
    corpus: Corpus,
    rankings_file: Path,
) -> Ranked:
    """Every system's rankings, timed (glmrag/eval/timing.py), each appended to ``rankings_file`` as it finishes."""
    # top_k null: every passage is ranked, so MRR is the reciprocal rank in the full ranking
    depth = len(corpus) if cfg.top_k is None else cfg.top_k
    ranking_log = RankingLog(rankings_file, keep=max(cfg.ks))
    out = Ranked()
    for name, retriever in retrievers.items():
        guarded = GuardedRetrieval(name, retriever, index, corpus, depth)
        with stage_progress(f"{name}: retrieval", len(questions), "question") as advance:  # a line every 15 s
            out.rankings[name], out.setup_seconds[name], out.ms_per_question[name] = timed_retrieve(
                retriever, questions, index, corpus, depth, run=guarded
            )
            advance(len(questions))  # retrievers rank a whole batch at once: counted when it is done
        out.failed[name] = guarded.failed
        ranking_log.append(name, out.rankings[name])  # kept if anything later fails (a full disk, a crash)
        setup = "not separated" if out.setup_seconds[name] is None else f"{out.setup_seconds[name]:.1f} s"
        log.info("%s: setup %s, %.1f ms per question", name, setup, out.ms_per_question[name])
    return out


def answer_all(
    cfg: DictConfig,
    retrievers: Mapping[str, Retriever],
    rankings: Mapping[str, list[Ranking]],
    questions: list[Question],
    index: KGIndex,
    corpus: Corpus,
) -> Answered:
    """With ``cfg.qa``: every system's answers and the QA baselines' (GLM-RAG §4.3, App. E); else nothing."""
    if not cfg.qa:
        return Answered()
    names = list(cfg.qa_baselines or [])
    clash = sorted(set(names) & set(retrievers))
    if clash:
        raise ValueError(f"qa_baselines {clash} share a name with a retriever; rename the retriever key")
    reader = make_reader(cfg.reader)
    answers = answer_systems(reader, retrievers, rankings, questions, corpus)
    return Answered(reader, answers, answer_baselines(reader, names, questions, index, cfg.qa_subgraph))


def score(
    cfg: DictConfig,
    rankings: Mapping[str, list[Ranking]],
    questions: list[Question],
    index: KGIndex,
    answers: Mapping[str, Mapping[str, str]] | None,
) -> EvalResult:
    """The evaluator over every system (the entity-cosine analysis when the index has entity embeddings)."""
    question_embeddings = None
    if index.entity_embeddings is not None and cfg.index.embed_model:
        question_embeddings = Embedder(cfg.index.embed_model).encode([q.question for q in questions])
    return evaluate(
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


def add_llm_fields(
    result: EvalResult,
    cfg: DictConfig,
    retrievers: Mapping[str, Retriever],
    questions: list[Question],
    ranked: Ranked,
    answered: Answered,
) -> None:
    """What the LLMs cost and did, into ``result``: costs per question and their means, failures, traces, the
    judge's ACC (DTKG §4.1, labelled as such), the reader's settings and the QA baselines' scores."""
    reader, baselines = answered.reader, answered.baselines
    costs: dict[str, list[dict[str, Usage]]] = {}
    if reader is not None or any(isinstance(r, LLMCostedRetriever) for r in retrievers.values()):
        costs = llm_costs([*retrievers, *baselines], retrievers, reader, questions)
        result.llm_cost = mean_costs(costs)
    add_qa_and_cost_columns(result, answered.answers, costs)
    result.llm_failures = failure_summary(ranked.failed, costs)
    add_traces(result, retrievers)  # what each LLM method decided per question; its summary and index cost
    if reader is None:
        return
    if cfg.get("qa_judge", False):
        result.acc_llm_judge = add_judged_accuracy(result.per_question, questions, LLMJudge(reader.llm))
    by_method = reader.llm.usage.by_method()
    read = [s for s in [*retrievers, *baselines] if not isinstance(retrievers.get(s), AnsweringRetriever)]
    result.qa = reader.settings() | {
        "baselines": list(baselines),
        "subgraph": OmegaConf.to_container(cfg.qa_subgraph, resolve=True),
        "answered_by_retriever": [s for s in retrievers if s not in read],
        # answers taken from a response without "Answer: ..." (glmrag.qa.reader.parse_answer)
        "answer_fallbacks": {s: by_method.get(reader_tag(s), Usage()).events.get(ANSWER_FALLBACK, 0) for s in read},
    }
    result.qa_baselines = baseline_scores(baselines, questions, cfg.n_boot, cfg.seed)


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
