"""Gold-passage reachability under subgraph budgets, by neighbourhood density (GLM-RAG App. D.2, Fig. 17).

App. D.2 splits questions into sparse, medium and dense terciles by the edges around their seeds and
asks whether the gold documents are reachable by the subgraph selection under varying hop and triplet
budgets. The paper gives no formulas; the ones used here: a gold passage is *reachable* when the
subgraph (seeds included) holds an entity it mentions; *density* is
:func:`~glmrag.graph.traverse.neighbourhood_triples` within ``density_hops`` (default 2) of the seeds;
*terciles* are equal-size groups of the questions sorted by density (ties by question order); the
fraction pools gold passages over questions, and questions without gold are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glmrag.data.types import Question
from glmrag.graph.subgraph import select_subgraph, subgraph_prefix_entities
from glmrag.graph.traverse import neighbourhood_triples
from glmrag.index.kg import KGIndex

DENSITY_GROUPS = ("sparse", "medium", "dense")
HOP_GRID = (1, 2, 3)
TRIPLET_GRID = (100, 200, 400, 600, 800)
"""Budgets around the paper's choice of 600 (GLM-RAG App. D.2, Fig. 17)."""


@dataclass(frozen=True)
class ReachabilityRow:
    """Reachability of the gold passages of one density group under one budget."""

    density: str
    """``sparse``, ``medium``, ``dense``, or ``all``."""
    max_hops: int
    max_triplets: int
    questions: int
    """Questions in the group (with at least one gold passage)."""
    gold: int
    """Gold passages of those questions."""
    reachable: int
    """Gold passages with an entity in the question's subgraph."""

    @property
    def fraction(self) -> float:
        return self.reachable / self.gold if self.gold else float("nan")


def density_terciles(densities: Sequence[int]) -> list[str]:
    """Label each question ``sparse`` / ``medium`` / ``dense`` by its rank in ``densities``.

    Equal-size groups (sizes differ by at most one; the extra go to the sparser
    groups); equal densities are split by position, so the labels are
    deterministic.
    """
    order = np.argsort(np.asarray(densities), kind="stable")
    labels = [""] * len(order)
    for name, part in zip(DENSITY_GROUPS, np.array_split(order, 3), strict=True):
        for i in part:
            labels[int(i)] = name
    return labels


def gold_reachability(
    questions: Sequence[Question],
    index: KGIndex,
    hops: Sequence[int] = HOP_GRID,
    triplets: Sequence[int] = TRIPLET_GRID,
    density_hops: int = 2,
    seed: int = 0,
) -> list[ReachabilityRow]:
    """Reachable gold passages for every (density group, max_hops, max_triplets), plus group ``all``.

    Rows come ordered by group (sparse, medium, dense, all), then hops, then
    triplets. Subgraphs are those of :func:`select_subgraph` with ``seed``; each
    question's subgraph is selected once at the largest budget and the smaller
    budgets read its prefixes (equal by :func:`select_subgraph`'s promises).
    """
    hops, triplets = sorted(set(hops)), sorted(set(triplets))
    kept = [q for q in questions if q.supporting]
    labels = density_terciles([neighbourhood_triples(index, index.seeds(q.id), density_hops) for q in kept])
    reach = np.zeros((len(kept), len(hops), len(triplets)), dtype=np.int64)
    gold = np.zeros(len(kept), dtype=np.int64)
    for qi, q in enumerate(kept):
        gold_entities = _gold_entities(index, q)
        gold[qi] = len(gold_entities)
        sub = select_subgraph(index, index.seeds(q.id), max_hops=hops[-1], max_triplets=triplets[-1], seed=seed)
        for hi, h in enumerate(hops):
            within = int(np.searchsorted(sub.hop, h, side="right"))  # hop is non-decreasing
            for ti, t in enumerate(triplets):
                entities = subgraph_prefix_entities(index, sub, min(t, within))
                reach[qi, hi, ti] = sum(bool(np.isin(g, entities).any()) for g in gold_entities)

    rows = []
    for group in (*DENSITY_GROUPS, "all"):
        members = np.array([group in ("all", lab) for lab in labels], dtype=bool)
        for hi, h in enumerate(hops):
            for ti, t in enumerate(triplets):
                rows.append(
                    ReachabilityRow(
                        group, h, t, int(members.sum()), int(gold[members].sum()), int(reach[members, hi, ti].sum())
                    )
                )
    return rows


def _gold_entities(index: KGIndex, question: Question) -> list[np.ndarray]:
    """Entities mentioned in each gold passage of ``question`` (empty for passages the index lacks)."""
    pe = index.passage_entities
    out = []
    for pid in dict.fromkeys(question.supporting):
        row = index.passage_position.get(pid)
        out.append(pe.indices[pe.indptr[row] : pe.indptr[row + 1]] if row is not None else np.empty(0, np.int64))
    return out


def format_table(rows: Sequence[ReachabilityRow]) -> str:
    """A plain-text table: one line per (group, hops), one column per triplet budget, cells in percent."""
    budgets = sorted({r.max_triplets for r in rows})
    cells = {(r.density, r.max_hops, r.max_triplets): r for r in rows}
    keys = list(dict.fromkeys((r.density, r.max_hops) for r in rows))
    lines = [f"{'group':<7} {'hops':>4} {'n':>4}" + "".join(f"{b:>8}" for b in budgets)]
    for group, h in keys:
        n = cells[(group, h, budgets[0])].questions
        line = f"{group:<7} {h:>4} {n:>4}"
        for b in budgets:
            line += f"{100 * cells[(group, h, b)].fraction:>7.1f}%"
        lines.append(line)
    return "\n".join(lines)
