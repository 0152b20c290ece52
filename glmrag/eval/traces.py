"""What each LLM method decided, per question and per system, for ``per_question.jsonl`` and ``results.md``.

A retriever may offer (duck-typed, as the evaluator's other optional parts):

- ``traces() -> {question id: dict}``: what it did for each question of its last
  ``retrieve`` (DTKG: track and why, Eq. 5 links with their similarity,
  triples kept after each stage, fallbacks; HyperAddress: restart incidences,
  heads, per round the passages read, pointer targets, rewrite before/after).
  Each becomes the ``trace`` field of that question's row;
- ``trace_summary() -> {group: {name: count}}``: counts over those traces
  (track distribution, fallback counts, rewrites fired), written to
  ``metrics.json`` ``settings.method_summary`` and shown in ``results.md``, so
  a run where a small LLM sends every question to one track, or no rewrite
  ever fires, is visible at a glance;
- ``index_llm_cost() -> {tag: Usage}``: LLM work done once per corpus
  (HyperAddress's descriptions and head selection, Read the Route Table 8),
  written to ``settings.index_llm_cost`` apart from the per-question cost.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from glmrag.eval.result import EvalResult


def _plain(value):
    """A JSON-safe copy: numpy scalars and arrays become Python numbers and lists."""

    def default(x):
        if isinstance(x, np.generic):
            return x.item()
        if isinstance(x, np.ndarray):
            return x.tolist()
        if hasattr(x, "__dataclass_fields__"):
            return {k: getattr(x, k) for k in x.__dataclass_fields__}
        raise TypeError(f"trace value {x!r} of type {type(x).__name__} is not JSON-serialisable")

    return json.loads(json.dumps(value, default=default))


def add_traces(result: EvalResult, retrievers: Mapping[str, object]) -> None:
    """Put each traced retriever's traces into its rows, and its summary and index cost into the settings."""
    summaries, index_cost = {}, {}
    for system, retriever in retrievers.items():
        traces = getattr(retriever, "traces", None)
        if callable(traces):
            by_id = _plain(traces())
            for row in result.per_question.get(system, []):
                if row["question_id"] in by_id:
                    row["trace"] = by_id[row["question_id"]]
        summary = getattr(retriever, "trace_summary", None)
        if callable(summary):
            summaries[system] = _plain(summary())
        index = getattr(retriever, "index_llm_cost", None)
        if callable(index):
            index_cost[system] = {tag: u.cost() for tag, u in index().items()}
    if summaries:
        result.settings["method_summary"] = summaries
    if index_cost:
        result.settings["index_llm_cost"] = index_cost


def _counts(group: Mapping) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, int | float) else f"{k} {v}" for k, v in group.items()) or "none"


def summary_lines(result: EvalResult) -> list[str]:
    """Markdown: one line per traced system with its summary groups, and the index cost table; [] without."""
    lines: list[str] = []
    summaries = result.settings.get("method_summary") or {}
    if summaries:
        lines += ["", "| System | What the method did (counts over questions) |", "|---|---|"]
        for system, groups in summaries.items():
            cells = "; ".join(f"**{name}**: {_counts(group)}" for name, group in groups.items())
            lines.append(f"| {system} | {cells} |")
        lines += [
            "",
            "Per-question traces are in per_question.jsonl (field `trace`); counts from each method's "
            "trace_summary() (metrics.json settings.method_summary).",
        ]
    judged = result.settings.get("acc_llm_judge") or {}
    if judged:
        label = next(iter(judged.values()))["label"]
        lines += ["", f"| System | {label} | Judged | Unreadable |", "|---|---:|---:|---:|"]
        for system, j in judged.items():
            mean = "–" if j["mean"] is None else f"{100 * j['mean']:.1f}"
            lines.append(f"| {system} | {mean} | {j['judged']} | {j['unreadable']} |")
        lines += [
            "",
            "ACC by an LLM judge (glmrag.qa.accuracy): the reader's LLM asked whether each answer means "
            "the gold one; a stand-in for DTKG's similarity-model ACC, not the paper's metric.",
        ]
    index_cost = {s: tags for s, tags in (result.settings.get("index_llm_cost") or {}).items() if tags}
    if index_cost:
        lines += [
            "",
            "| System | Index LLM work | Calls | Prompt tokens | Generated tokens | LLM s |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for system, tags in index_cost.items():
            for tag, u in tags.items():
                lines.append(
                    f"| {system} | {tag} | {u['calls']} | {u['prompt_tokens']} | {u['generated_tokens']} | "
                    f"{u['seconds']:.2f} |"
                )
        lines += [
            "",
            "Index cost: LLM work done once per corpus in this process (descriptions, addressing-head "
            "selection; zero when read from a cache, whose cost when it ran is in the head_selection summary), apart "
            "from the per-question cost above.",
        ]
    return lines
