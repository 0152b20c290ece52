"""Writing an :class:`~glmrag.eval.result.EvalResult`: ``metrics.json``, ``per_question.jsonl``, ``results.md``.

:func:`write_outputs` writes each file atomically. ``metrics.json`` holds counts, ``settings`` (the evaluator's
and the evaluation job's, :meth:`~glmrag.eval.result.EvalResult.settings_json`), the ``warnings`` printed above
the table, the overall means with CIs, breakdowns, significance against the reference, and a ``headline``:
per system Recall@2/@5 with the share of questions on which each LLM decision fell back and the system whose
rankings it repeats (:func:`~glmrag.eval.traces.llm_notes`). Per-question rows carry a system's LLM cost as
:func:`cost_columns`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from glmrag.eval.overlap import overlap_note, unchecked_note
from glmrag.eval.result import EvalResult
from glmrag.eval.significance import Interval
from glmrag.eval.traces import fallback_cell, fallback_warning, llm_notes, summary_lines
from glmrag.index.ranking import Ranking
from glmrag.io import atomic_write_text, write_error
from glmrag.llm.base import COST_FIELDS

_LABELS = {
    "mrr": "MRR",
    "em": "EM",
    "f1": "F1",
    "acc": "ACC (contains)",
    "entity_cosine": "Entity cos",
    "entity_hops": "Entity hops",
}
_COST_LABELS = ("LLM calls", "Prompt tokens", "Generated tokens", "LLM s")


def cost_columns() -> list[str]:
    """The per-question row keys of :data:`COST_FIELDS`: ``llm_calls``, ``llm_prompt_tokens``, ..."""
    return [f"llm_{f}" for f in COST_FIELDS]


def _label(metric: str) -> str:
    if metric in _LABELS:
        return _LABELS[metric]
    name, _, k = metric.partition("@")
    return {
        "recall": f"Recall@{k}",
        "filtered_recall": f"Filtered R@{k}",
        "hits": f"Hits@{k}",
        "all": f"All@{k}",
    }.get(name, metric)


def _cut_label(metric: str, depth: int | None) -> str:
    """The column label, MRR as ``MRR@k`` when the rankings were cut at ``k`` (a gold passage below ``k``
    counts 0, so it is not the full ranking's MRR)."""
    return f"MRR@{depth}" if metric == "mrr" and depth is not None else _label(metric)


def _table_metrics(result: EvalResult) -> list[str]:
    """Columns of the main table: Recall@2/@5 with CIs, filtered Recall@2/@5, Hits@5, All@5, MRR, EM, F1."""
    ks = [k for k in (2, 5) if k in result.ks] or list(result.ks[:2])
    k_single = 5 if 5 in result.ks else ks[-1]
    wanted = (
        [f"recall@{k}" for k in ks]
        + [f"filtered_recall@{k}" for k in ks]
        + [f"hits@{k_single}", f"all@{k_single}", "mrr", "em", "f1", "acc"]
    )
    return [m for m in wanted if m in result.metric_names]


def _cell(interval: Interval | None, with_ci: bool, scale: float = 100.0, digits: int = 1) -> str:
    if interval is None:
        return "–"
    mean = f"{interval.mean * scale:.{digits}f}"
    if not with_ci:
        return mean
    return f"{mean} [{interval.low * scale:.{digits}f}, {interval.high * scale:.{digits}f}]"


def format_console(result: EvalResult) -> str:
    """:func:`format_markdown` for a terminal: the same tables, without Markdown's escapes (``**``, not ``\\*\\*``)
    and without the bold around warning lines."""
    lines = format_markdown(result).replace("\\*", "*").splitlines()
    return "\n".join(line[2:-2] if line.startswith("**") and line.endswith("**") else line for line in lines)


def format_markdown(result: EvalResult) -> str:
    """A Markdown report: one row per system, Recall@2/@5 with 95% CIs, filtered recall labelled as
    such, Hits/All@5, MRR (and EM/F1 when answers were given); App. H markers on tested metrics;
    a second table of the §6 analysis measures when any system has them."""
    # Escaped so that a lone ``**`` is not read as Markdown emphasis.
    markers = {(c.system, c.metric): c.marker.replace("*", "\\*") for c in result.significance}
    metrics = _table_metrics(result)
    with_ci = {m for m in metrics if m.startswith("recall@") or m in ("em", "f1", "acc")}
    notes_by_system = llm_notes(result)
    with_llm = any(n["fallbacks"] is not None for n in notes_by_system.values())
    lines = [
        "| System | "
        + " | ".join(_cut_label(m, result.ranking_depth) for m in metrics)
        + (" | LLM fallbacks" if with_llm else "")
        + " |",
        "|---|" + "---:|" * len(metrics) + ("---|" if with_llm else ""),
    ]
    for system in result.systems:
        name = f"{system} (ref)" if system == result.reference else system
        if system in result.train_overlap:
            name += " (trained on these questions)"
        elif system in result.overlap_unchecked:
            name += " (training questions not checked)"
        if notes_by_system[system]["identical_to"]:
            name += f" (= {notes_by_system[system]['identical_to']})"
        cells = [_cell(result.overall[system].get(m), m in with_ci) + markers.get((system, m), "") for m in metrics]
        if with_llm:
            cells.append(fallback_cell(notes_by_system[system]["fallbacks"]))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    c = result.counts
    notes = [
        f"{c['evaluated']} questions with gold passages ({c['excluded_no_gold']} without gold excluded from "
        f"retrieval metrics; QA metrics over all {c['questions']}). Values ×100; brackets: "
        f"{result.settings.level:.0%} bootstrap CI ({result.settings.n_boot} resamples).",
        "Filtered R@k (GFM-RAG's training-time metric) ranks each gold passage only against the non-gold "
        "passages and overstates recall; it is not comparable with Recall@k.",
    ]
    notes += _llm_notes_lines(result, notes_by_system)
    for warning in (unchecked_note(result.overlap_unchecked), overlap_note(result.train_overlap)):
        if warning:
            notes.insert(0, warning)
    if c["evaluated"] == 0:
        notes.insert(
            0, "No question has gold passages: retrieval metrics are skipped; the rankings are in per_question.jsonl."
        )
    fell_back = fallback_warning(notes_by_system)
    if fell_back:
        notes.insert(0, f"**{fell_back}**")
    untested = result.settings.untested_metrics
    if result.reference is not None and untested:
        counts = ", ".join(f"{_label(m)} on {n}" for m, n in untested.items())
        notes.append(
            f"No significance markers for {counts} paired question(s): a paired test needs at least "
            f"{result.settings.min_paired} (with fewer, the bootstrap has no spread to test against)."
        )
    if result.reference is not None and result.significance:
        tested = ", ".join(_label(m) for m in result.settings.tested_metrics)
        notes.append(
            f"Paired {result.settings.test} test vs {result.reference} on {tested}, "
            f"Holm-Bonferroni corrected over {len(result.significance)} comparisons (GLM-RAG App. H): "
            f"\\*/\\*\\*/\\*\\*\\* = {result.reference} significantly better (p < .05/.01/.001), "
            f"† = significantly worse."
        )
    lines += [""] + [f"{n}  " for n in notes[:-1]] + [notes[-1]]
    if result.warnings:  # above the table: a reader must not take the numbers without them
        lines = [f"**{w}**  " for w in result.warnings[:-1]] + [f"**{result.warnings[-1]}**", ""] + lines

    analysis = [m for m in ("entity_cosine", "entity_hops") if m in result.metric_names]
    if analysis:
        lines += ["", "| System | " + " | ".join(_label(m) for m in analysis) + " |", "|---|" + "---:|" * len(analysis)]
        for system in result.systems:
            cells = [_cell(result.overall[system].get(m), False, scale=1.0, digits=3) for m in analysis]
            lines.append(f"| {system} | " + " | ".join(cells) + " |")
        lines += [
            "",
            f"Analysis measures (GLM-RAG §6, App. G) over the top-{result.settings.entity_k} retrieved "
            "entities: mean question-entity cosine, and mean hop distance from the seeds over reachable "
            f"entities (BFS cutoff {result.settings.bfs_cutoff}); – = the system returns no entities.",
        ]
    sections = _timing_lines(result) + _qa_baseline_lines(result) + _cost_lines(result) + summary_lines(result)
    return "\n".join(lines + sections) + "\n"


def _llm_notes_lines(result: EvalResult, notes: dict[str, dict]) -> list[str]:
    """What the "(= system)" marks and the LLM fallbacks column mean; [] when the table has neither."""
    lines = []
    twins = {s: n["identical_to"] for s, n in notes.items() if n["identical_to"]}
    if twins:
        depth = max((len(r.get("top_passages", [])) for rows in result.per_question.values() for r in rows), default=0)
        lines.append(
            f"(= x): the same ranked passages (top {depth}) as system x on every question, so every retrieval "
            "metric is x's: that row's switch changed nothing on these questions."
        )
    if any(n["fallbacks"] is not None for n in notes.values()):
        lines.append(
            "LLM fallbacks, k/n: on k of the n questions where an LLM decision was made its reply could not be "
            "used and its documented fallback decided instead (glmrag/eval/traces.py: classifier, reranker, "
            "necessity, ...; no triples: the ranking is dense order; HyperAddress: a reader pointing at nothing, a "
            "rewrite that never fired); head selection: held-out probes whose target the addressing heads miss "
            "(mean over heads; Read the Route §3: 41% missed). Per question: per_question.jsonl, trace field "
            "`fell_back`."
        )
    return lines


def _timing_lines(result: EvalResult) -> list[str]:
    """One-off setup and per-question time of each system (glmrag/eval/timing.py); [] when not measured."""
    ms, setup = result.ms_per_question, result.setup_seconds
    if not ms or setup is None:
        return []
    lines = ["", "| System | Setup s | ms / question |", "|---|---:|---:|"]
    for system in result.systems:
        once = setup.get(system)
        lines.append(f"| {system} | {'–' if once is None else f'{once:.1f}'} | {ms.get(system, math.nan):.1f} |")
    lines += [
        "",
        "Setup: the one-off work of a retriever's first call (model load, corpus embeddings), measured on one "
        "question; ms / question: a warm call over all questions. – = not separated (a retriever that answers: "
        "its one call includes the setup). The index build is not included.",
    ]
    return lines


def _qa_baseline_lines(result: EvalResult) -> list[str]:
    """The QA baselines' EM/F1 with CIs (``result.qa_baselines``), and a note on the reader; [] without QA."""
    baselines, qa = result.qa_baselines, result.qa
    lines: list[str] = []
    if baselines:
        lines += ["", "| QA baseline | EM | F1 |", "|---|---:|---:|"]
        for name, scores in baselines.items():
            lines.append(f"| {name} | {_cell(scores.get('em'), True)} | {_cell(scores.get('f1'), True)} |")
        lines += [
            "",
            "Baselines answered by the reader without a ranking: no_context (GLM-RAG §5.1 e), subgraph (the "
            "question's KG subgraph as triples, App. E Table 8); values ×100 over all questions, with the "
            "systems' bootstrap resamples.",
        ]
    if qa:
        fallbacks = ", ".join(f"{s} {n}" for s, n in qa.get("answer_fallbacks", {}).items())
        lines += [
            "",
            f"Reader: {qa.get('llm')} ({qa.get('family')} one-shot prompt, GLM-RAG Fig. 20), top-"
            f"{qa.get('passages')} passages, at most {qa.get('max_new_tokens')} new tokens; answers without "
            f'"Answer:" (last line taken): {fallbacks or "none"}.',
        ]
    return lines


def _cost_lines(result: EvalResult) -> list[str]:
    """Mean LLM cost per question of each system (``result.llm_cost``) beside ms per question; [] without."""
    costs, ms = result.llm_cost, result.ms_per_question
    if not costs:
        return []
    lines = ["", "| System | ms / question | " + " | ".join(_COST_LABELS) + " |", "|---|" + "---:|" * 5]
    for system, parts in costs.items():
        total = parts["total"]
        cells = [f"{ms[system]:.1f}" if system in ms else "–", f"{total['calls']:.2f}"]
        cells += [f"{total['prompt_tokens']:.1f}", f"{total['generated_tokens']:.1f}", f"{total['seconds']:.2f}"]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Mean per question: ms of a warm retrieve() (setup apart), and LLM calls, tokens and seconds of the "
        "retriever and the QA reader together (metrics.json settings.llm_cost splits them).",
    ]
    return lines


def _clean(value):
    """JSON-safe copy: NaN/inf -> None, tuples -> lists, Intervals -> dicts."""
    if isinstance(value, Interval):
        return _clean(asdict(value))
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def headline(result: EvalResult) -> dict:
    """Per system, the main table's Recall@2/@5 means with what qualifies them: ``fallbacks`` (decision ->
    ``{"fell_back", "of", "unit"}``, None for a system without LLM decisions) and ``identical_to``; and
    ``warning``, the run's :func:`~glmrag.eval.traces.fallback_warning` (None without one)."""
    notes = llm_notes(result)
    wanted = [m for m in ("recall@2", "recall@5") if m in result.metric_names]
    systems = {
        s: {m: getattr(result.overall[s].get(m), "mean", None) for m in wanted} | notes[s] for s in result.systems
    }
    return {"systems": systems, "warning": fallback_warning(notes)}


def metrics_json(result: EvalResult) -> dict:
    """The content of ``metrics.json`` as a JSON-safe dict."""
    return _clean(
        {
            "systems": result.systems,
            "reference": result.reference,
            "ks": result.ks,
            "headline": headline(result),
            "counts": result.counts,
            "warnings": result.warnings,
            "settings": result.settings_json(),
            "metrics": result.metric_names,
            "overall": result.overall,
            "breakdowns": result.breakdowns,
            "significance": [
                {
                    "system": c.system,
                    "reference": c.reference,
                    "metric": c.metric,
                    "diff": c.diff,
                    "p_value": c.p_value,
                    "p_holm": c.p_holm,
                    "marker": c.marker,
                }
                for c in result.significance
            ],
        }
    )


HYDRA_FILES = (".hydra",)
"""What Hydra writes into its run folder before the job starts (with the job's ``*.log``)."""


class OutputDirTaken(FileExistsError):
    """An output folder that already holds another run's files; names the folder, the files and the fix."""


def fresh_output_dir(output_dir: str | os.PathLike, key: str = "output_dir") -> Path:
    """``output_dir``, made when missing, when it holds no file but Hydra's own (:data:`HYDRA_FILES`, ``*.log``);
    else :class:`OutputDirTaken`. A run writes its files into a folder of its own, each file once
    (:func:`write_outputs`): it never replaces or removes a file it did not write."""
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    taken = sorted(p.name for p in folder.iterdir() if p.name not in HYDRA_FILES and p.suffix != ".log")
    if taken:
        shown = ", ".join(taken[:4]) + (f" and {len(taken) - 4} more" if len(taken) > 4 else "")
        raise OutputDirTaken(
            f"{key}={folder} already holds {shown}: a run writes into a folder of its own and replaces nothing; "
            f"pass a new {key}=<folder>, or leave it unset for a new folder per run"
        )
    return folder


def write_outputs(result: EvalResult, output_dir: str | os.PathLike) -> dict[str, Path]:
    """Write ``metrics.json``, ``per_question.jsonl`` and ``results.md`` into ``output_dir`` (made if needed),
    each whole; a file already there is never replaced (``FileExistsError``). Returns their paths by file name."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in ("metrics.json", "per_question.jsonl", "results.md")}
    metrics = json.dumps(metrics_json(result), indent=2, allow_nan=False) + "\n"
    atomic_write_text(paths["metrics.json"], metrics, replace=False)
    lines = [
        json.dumps(_clean(row), allow_nan=False, ensure_ascii=False)
        for system in result.systems
        for row in result.per_question[system]
    ]
    atomic_write_text(paths["per_question.jsonl"], "\n".join(lines) + "\n", replace=False)
    atomic_write_text(paths["results.md"], format_markdown(result), replace=False)
    return paths


RANKINGS_FILE = "rankings.jsonl"
"""Each system's top passages per question, written as each system finishes (:class:`RankingLog`)."""


class RankingLog:
    """``rankings.jsonl`` in the output folder: a system's top ``keep`` passages for every question, appended and
    fsynced as soon as that system has ranked them all, so a failure later in the run (a full disk at the
    tables, a crash in another system) keeps them. A failed append is cut back: no half-written line."""

    def __init__(self, path: str | os.PathLike, keep: int) -> None:
        self.path, self.keep = Path(path), keep
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # FileExistsError: not ours

    def append(self, system: str, rankings: Sequence[Ranking]) -> None:
        rows = [
            {
                "system": system,
                "question_id": r.question_id,
                "passage_ids": r.passage_ids[: self.keep],
                "passage_scores": r.passage_scores[: self.keep],
            }
            for r in rankings
        ]
        text = "".join(json.dumps(_clean(row), allow_nan=False, ensure_ascii=False) + "\n" for row in rows)
        data = memoryview(text.encode("utf-8"))
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except OSError as err:
            os.ftruncate(fd, end)
            raise write_error(self.path, err) from err
        finally:
            os.close(fd)
