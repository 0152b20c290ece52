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

**Fallback shares.** A small LLM can leave every decision of a method to its
documented fallback, and then the row measures the fallbacks, not the method.
:func:`question_decisions` reads from one question's trace which LLM decisions
were made and which fell back (DTKG: the classifier's ``why``, the usage events
of :data:`DTKG_EVENTS`, the stages; HyperAddress: a round whose reader pointed at
nothing, a rewrite that never fired); :func:`add_traces` writes the ones that
fell back into the trace as ``fell_back``. :func:`llm_notes` counts them per
system (fell back / made), adds the addressing-head selection's held-out misses
(a once-per-corpus decision, counted in held-out probes) and marks a system
whose ranked passages equal an earlier system's on every question
(``identical_to``). ``results.md`` shows both beside the metrics,
``metrics.json`` keeps them in ``headline``, and a run where a decision fell
back on more than half of the questions it was made on says so
(:func:`fallback_warning`) in the log and as the first line under the table.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from glmrag.eval.result import EvalResult

log = logging.getLogger(__name__)

DTKG_EVENTS = {
    "decompose_fallback": "decomposition",
    "subject_fallback": "subject",
    "central_fallback": "central entity",
    "rerank_fallback": "reranker",
    "select_fallback": "selection",
    "necessity_fallback": "necessity",
    "rewrite_fallback": "fact rewrite",
    "draft_fallback": "answer",
    "answer_fallback": "answer",
}
"""DTKG usage events (glmrag/retrievers/dtkg) -> the LLM decision whose reply could not be read. The
classifier is read from the trace's ``why``; ``label_fallback`` events beyond the classifier's are the
yes/no checks (fact verification, Eq. 8; sufficiency, Eq. 13)."""
DECISIONS = (
    "classifier",
    "decomposition",
    "subject",
    "central entity",
    "reranker",
    "selection",
    "yes/no check",
    "necessity",
    "fact rewrite",
    "answer",
    "no triples",
    "pointer",
    "generated name",
    "rewrite",
    "head selection",
)
"""Every decision :func:`question_fallbacks` and :func:`llm_notes` name, in report order."""
MAJORITY = 0.5
"""A decision that fell back on more than this share of its questions is a warning of the run."""


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


def _dtkg_asked(trace: Mapping) -> set[str]:
    """The LLM decisions a DTKG trace shows were asked (whatever the reply)."""
    asked = {"answer"}
    if str(trace.get("why", "")).startswith("classifier"):
        asked.add("classifier")
    stages = trace.get("triples")
    if trace.get("track") == "chain" and isinstance(stages, list):
        asked.add("central entity")
        if any(layer.get("scored", 0) for layer in stages):
            asked.add("reranker")
        if any(layer.get("llm_selection") for layer in stages):
            asked.add("selection")
        if any(layer.get("chosen", 0) for layer in stages):
            asked.add("necessity")
        if trace.get("checks", 0):
            asked.add("yes/no check")
    elif trace.get("track") == "parallel" and isinstance(stages, dict):
        asked |= {"decomposition", "subject"}
        if any(stages.get("scored", [])):
            asked.add("reranker")
        if any(stages.get("top_k_after_cross_redundancy", [])):
            asked.add("necessity")
        supported = trace.get("supported") or []
        if any(v is not None for v in supported):
            asked.add("yes/no check")
        if any(v is False for v in supported):
            asked.add("fact rewrite")
    return asked


def question_decisions(trace: Mapping) -> dict[str, bool] | None:
    """The LLM decisions made on one question, each True when it fell back, in :data:`DECISIONS` order; None
    when the trace records no LLM decision (HyperAddress's walk only).

    DTKG: a decision is made when the trace shows its step ran (:func:`_dtkg_asked`) or it fell back; the
    classifier fell back when ``why`` says "classifier fallback", the decisions of :data:`DTKG_EVENTS` when their
    event was counted, "yes/no check" for ``label_fallback`` events beyond the classifier's; "no triples" is the
    question's ranking left to dense order (no KG triple used). HyperAddress: "pointer" ("generated name" in
    that variant) fell back when a round's reader gave every read entity score 0, "rewrite" when rewriting was
    tried and no round rewrote.
    """
    fell: set[str] = set()
    if "why" in trace:  # DTKG
        asked = _dtkg_asked(trace)
        events = trace.get("fallbacks", {})
        classifier = str(trace["why"]).startswith("classifier fallback")
        if classifier:
            fell.add("classifier")
        fell |= {DTKG_EVENTS[e] for e, n in events.items() if n and e in DTKG_EVENTS}
        if events.get("label_fallback", 0) > int(classifier):
            fell.add("yes/no check")
        asked |= fell | {"no triples"}
        if not trace.get("used"):
            fell.add("no triples")
    elif trace.get("rounds"):  # HyperAddress, steered
        rounds = trace["rounds"]
        pointer = "generated name" if any("generated_name" in r for r in rounds) else "pointer"
        asked = {pointer}
        if any(not r["targets"] or r["targets"][0][1] <= 0 for r in rounds):
            fell.add(pointer)
        tried = [r["rewrite"] for r in rounds if r.get("rewrite") is not None]
        if tried:
            asked.add("rewrite")
            if not any(isinstance(r, dict) for r in tried):
                fell.add("rewrite")
    else:
        return None
    return {d: d in fell for d in DECISIONS if d in asked}


def question_fallbacks(trace: Mapping) -> list[str] | None:
    """The decisions of :func:`question_decisions` that fell back (the trace's ``fell_back``); None likewise."""
    decisions = question_decisions(trace)
    return None if decisions is None else [d for d, fell in decisions.items() if fell]


def add_traces(result: EvalResult, retrievers: Mapping[str, object]) -> None:
    """Put each traced retriever's traces into its rows (with :func:`question_fallbacks` as ``fell_back``), its
    summary and index cost into ``result.method_summary`` and ``result.index_llm_cost``; log
    :func:`fallback_warning` when there is one."""
    summaries, index_cost = {}, {}
    for system, retriever in retrievers.items():
        traces = getattr(retriever, "traces", None)
        if callable(traces):
            by_id = _plain(traces())
            for row in result.per_question.get(system, []):
                if row["question_id"] in by_id:
                    row["trace"] = by_id[row["question_id"]]
                    fell_back = question_fallbacks(row["trace"])
                    if fell_back is not None:
                        row["trace"]["fell_back"] = fell_back
        summary = getattr(retriever, "trace_summary", None)
        if callable(summary):
            summaries[system] = _plain(summary())
        index = getattr(retriever, "index_llm_cost", None)
        if callable(index):
            index_cost[system] = {tag: u.cost() for tag, u in index().items()}
    result.method_summary |= summaries
    result.index_llm_cost |= index_cost
    warning = fallback_warning(llm_notes(result))
    if warning:
        log.warning(warning)


def _head_misses(summary: Mapping) -> dict | None:
    """The addressing-head selection's held-out misses (mean over the selected heads), or None."""
    heads = summary.get("head_selection")
    if not heads or not heads.get("held_out_probes"):
        return None
    probes = int(heads["held_out_probes"])
    missed = round((1.0 - float(heads["mean_held_out_hit_rate"])) * probes, 1)
    return {"fell_back": missed, "of": probes, "unit": "held-out probes"}


def system_fallbacks(rows: Sequence[Mapping], summary: Mapping | None = None) -> dict[str, dict] | None:
    """Per decision that fell back at least once, on how many of the questions where it was made
    (``{"fell_back", "of", "unit": "questions"}``), plus the head selection's held-out misses from the
    system's ``trace_summary``; None when no row records an LLM decision."""
    decided = [d for d in (question_decisions(r["trace"]) for r in rows if "trace" in r) if d is not None]
    if not decided:
        return None
    out = {}
    for name in DECISIONS:
        made = [d[name] for d in decided if name in d]
        if any(made):
            out[name] = {"fell_back": sum(made), "of": len(made), "unit": "questions"}
    heads = _head_misses(summary or {})
    if heads is not None and heads["fell_back"] > 0:
        out["head selection"] = heads
    return out


def identical_systems(result: EvalResult, among: set[str] | None = None) -> dict[str, str]:
    """System -> the first earlier system (table order) whose ranked passages (``top_passages``) equal its own on
    every question; with ``among``, only pairs of which one system is in ``among`` (the LLM methods: a baseline
    repeating a baseline is no switch that did nothing). Systems without questions are never marked."""
    seen: list[tuple[str, list]] = []
    out = {}
    for system in result.systems:
        ranked = [row.get("top_passages") for row in result.per_question.get(system, [])]
        twins = [o for o, r in seen if r == ranked and (among is None or system in among or o in among)]
        if ranked and twins:
            out[system] = twins[0]
        seen.append((system, ranked))
    return out


def llm_notes(result: EvalResult) -> dict[str, dict]:
    """System -> ``{"fallbacks": system_fallbacks or None, "identical_to": system or None}``; ``identical_to``
    only where one of the pair is an LLM method (its trace records LLM decisions, or its retriever called an
    LLM: ``result.llm_cost``, for runs stored before traces)."""
    summaries = result.method_summary
    fallbacks = {s: system_fallbacks(result.per_question.get(s, []), summaries.get(s)) for s in result.systems}
    costs = result.llm_cost
    llm = {s for s in result.systems if fallbacks[s] is not None or costs.get(s, {}).get("retriever", {}).get("calls")}
    twins = identical_systems(result, among=llm)
    return {s: {"fallbacks": fallbacks[s], "identical_to": twins.get(s)} for s in result.systems}


def fallback_cell(fallbacks: Mapping[str, Mapping] | None) -> str:
    """ "classifier 20/20, reranker 3/20" (units other than questions named); "none"; "–" for no LLM decision."""
    if fallbacks is None:
        return "–"
    parts = []
    for name, f in fallbacks.items():
        unit = "" if f.get("unit", "questions") == "questions" else f" {f['unit']}"
        parts.append(f"{name} {f['fell_back']:g}/{f['of']}{unit}")
    return ", ".join(parts) or "none"


def fallback_warning(notes: Mapping[str, Mapping]) -> str | None:
    """One sentence naming every decision that fell back on more than half of its questions (or probes), or None."""
    majority = []
    for system, note in notes.items():
        heavy = {d: f for d, f in (note.get("fallbacks") or {}).items() if f["fell_back"] > MAJORITY * f["of"]}
        if heavy:
            majority.append(f"{system} ({fallback_cell(heavy)})")
    if not majority:
        return None
    return (
        "Warning: LLM decisions fell back on more than half of the questions in "
        + "; ".join(majority)
        + ": those rows measure the fallbacks, not the method."
    )


def _counts(group: Mapping) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, int | float) else f"{k} {v}" for k, v in group.items()) or "none"


def summary_lines(result: EvalResult) -> list[str]:
    """Markdown: one line per traced system with its summary groups, and the index cost table; [] without."""
    lines: list[str] = []
    summaries = result.method_summary
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
    judged = result.acc_llm_judge
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
    index_cost = {s: tags for s, tags in result.index_llm_cost.items() if tags}
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
