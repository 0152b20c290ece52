"""Question groupings and graph analysis measures of GLM-RAG App. D and §6.

Groupings give every evaluated question a bucket: its number of supporting passages, its hop count, its
entity-level depth (App. D.1) and its neighbourhood density tercile (App. D.2, Fig. 17-18);
:func:`group_means` averages any per-question metric within each bucket, with bootstrap CIs on request.
The analysis measures (§6, computed as in App. G) describe what a retriever returns: the mean cosine
between the question and its top-k retrieved entities, and their mean hop distance from the seeds
(None for rankings without ``Ranking.entity_ids``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from glmrag.data.types import Question
from glmrag.eval.significance import bootstrap_ci
from glmrag.graph.traverse import hop_distances, triples_within
from glmrag.index.kg import KGIndex
from glmrag.retrievers.base import Ranking

BFS_CUTOFF = 10
"""Hop cutoff of the depth and distance BFS (App. D.1 and App. G "Distance Measure": cutoff of 10 hops)."""
DENSITY_HOPS = 2
"""Neighbourhood radius for density (App. D.2: 2 hops reach >96% of gold documents; the subgraph radius)."""
DENSITY_LABELS = ("low", "mid", "high")
"""Equal-size terciles of neighbourhood triples (App. D.2: sparse/medium/dense, "equal terciles")."""
ENTITY_K = 10
"""Top-k retrieved entities of the analysis measures; App. G leaves k unstated."""
UNREACHABLE = "unreachable"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class QuestionFeatures:
    """Retriever-independent facts about one question, used for grouping."""

    n_supporting: int
    hops: int | None
    depth: int | None
    """Entity-level depth (:func:`entity_depth`); None when no supporting entity is reachable."""
    density: int
    """Triples within :data:`DENSITY_HOPS` hops of the seeds (:func:`neighbourhood_triples`)."""

    @property
    def supporting_bucket(self) -> str:
        return str(self.n_supporting)

    @property
    def hops_bucket(self) -> str:
        return UNKNOWN if self.hops is None else str(self.hops)

    @property
    def depth_bucket(self) -> str:
        return UNREACHABLE if self.depth is None else str(self.depth)


Distances = np.ndarray | Mapping[int, int]
"""Hop distances from a question's seeds: a :func:`seed_distances` array (``-1``: farther than the cutoff) or a
dict entity -> hops of the reached entities only (:func:`glmrag.graph.traverse.bfs_distances`)."""


def seed_distances(index: KGIndex, question_id: str, cutoff: int = BFS_CUTOFF) -> np.ndarray:
    """Hop distance of every entity from the question's nearest seed; ``-1`` beyond ``cutoff`` or without seeds.

    Shapes: -> ``(E,)`` (:func:`glmrag.graph.traverse.hop_distances`).
    """
    return hop_distances(index, index.seeds(question_id), cutoff=cutoff)


def _reached(distances: Distances, entities) -> list[int]:
    """Distances of the reached ``entities``, in order; the unreached are left out."""
    if isinstance(distances, Mapping):
        return [distances[e] for e in entities if e in distances]
    found = distances[np.asarray(entities, dtype=np.int64)]
    return found[found >= 0].tolist()


def entity_depth(
    index: KGIndex, question: Question, cutoff: int = BFS_CUTOFF, distances: Distances | None = None
) -> int | None:
    """Entity-level depth of a question (GLM-RAG App. D.1).

    The supporting entities are the entities of the gold passages
    (``index.entities_of_passages``); each one's distance is its BFS distance to
    the nearest seed, edges followed both ways, up to ``cutoff`` hops. The depth
    is the largest distance among the reachable supporting entities, so a
    question whose supporting entities are all seeds has depth 0. Returns None
    ('unreachable') when the question has no seeds, no supporting entity, or
    none within the cutoff. ``distances`` (from :func:`seed_distances`) saves the BFS.
    """
    dist = seed_distances(index, question.id, cutoff) if distances is None else distances
    reached = _reached(dist, index.entities_of_passages(list(question.supporting)))
    return max(reached) if reached else None


def question_features(
    questions: Sequence[Question], index: KGIndex, distances: Sequence[np.ndarray] | None = None
) -> list[QuestionFeatures]:
    """Supporting count, hops, entity depth and neighbourhood density of each question, in order.

    ``distances[i]`` may give question i's :func:`seed_distances` (cutoff at least ``DENSITY_HOPS - 1``),
    computed once and shared: depth and density both read it, so each question is searched once.
    """
    if distances is None:
        distances = [seed_distances(index, q.id) for q in questions]
    return [
        QuestionFeatures(
            n_supporting=len(set(q.supporting)),
            hops=q.hops,
            depth=entity_depth(index, q, distances=dist),
            density=triples_within(index, dist, DENSITY_HOPS - 1),
        )
        for q, dist in zip(questions, distances, strict=True)
    ]


def density_terciles(density: Sequence[int] | np.ndarray) -> list[str]:
    """Label each question low/mid/high by the tercile of its density among the given questions.

    Terciles are equal in size (App. D.2 splits the skewed density distribution
    "in equal terciles"): questions are sorted by density, ties in input order,
    and cut into three near-equal parts, so equal densities may straddle a cut.

    Shapes:
        density: (n,) neighbourhood triple counts; returns n labels.
    """
    density = np.asarray(density)
    order = np.argsort(density, kind="stable")
    labels = [""] * density.size
    for label, part in zip(DENSITY_LABELS, np.array_split(order, len(DENSITY_LABELS)), strict=True):
        for i in part:
            labels[int(i)] = label
    return labels


def row_bucket(row: Mapping, grouping: str) -> str | None:
    """The bucket of ``grouping`` a row of the evaluator's ``per_question`` is in (as :class:`QuestionFeatures`
    labels it); None for a density bucket of a question without gold passages."""
    if grouping == "n_supporting":
        return str(row["n_supporting"])
    if grouping == "hops":
        return UNKNOWN if row["hops"] is None else str(row["hops"])
    if grouping in ("depth", "density"):
        return row[f"{grouping}_bucket"]
    raise ValueError(f"unknown grouping {grouping!r}; expected n_supporting, hops, depth or density")


def _bucket_key(label: str) -> tuple[int, float, str]:
    try:
        return (0, float(label), label)
    except ValueError:
        order = {name: i for i, name in enumerate(DENSITY_LABELS)}
        return (1, order.get(label, len(order)), label)


def group_means(
    metrics: Mapping[str, Sequence[float | None]], buckets: Sequence[str], n_boot: int | None = None, seed: int = 0
) -> dict[str, dict]:
    """Mean of each metric within each bucket, plus the bucket size ``n``.

    ``metrics[name][i]`` is question i's value (None: not defined for that
    question, left out of that mean); ``buckets[i]`` its label. Buckets come out
    in numeric order, then low/mid/high, then other labels ('unknown',
    'unreachable'). A mean over no defined values is None. With ``n_boot``, a
    bucket also holds ``ci``: metric -> ``[low, high]``, the 95% percentile
    bootstrap interval of its mean (:func:`~glmrag.eval.significance.bootstrap_ci`, ``seed``).
    """
    groups: dict[str, list[int]] = {}
    for i, label in enumerate(buckets):
        groups.setdefault(label, []).append(i)
    out: dict[str, dict] = {}
    for label in sorted(groups, key=_bucket_key):
        rows = groups[label]
        entry: dict = {"n": len(rows)}
        intervals: dict[str, list[float]] = {}
        for name, values in metrics.items():
            defined = [values[i] for i in rows if values[i] is not None]
            entry[name] = float(np.mean(defined)) if defined else None
            if n_boot and defined:
                ci = bootstrap_ci(defined, n_boot, seed)
                intervals[name] = [ci.low, ci.high]
        if intervals:
            entry["ci"] = intervals
        out[label] = entry
    return out


# --- analysis measures (§6, App. G) ---------------------------------------------------------------


def entity_cosine(ranking: Ranking, question_embedding: np.ndarray, index: KGIndex, k: int = ENTITY_K) -> float | None:
    """Mean cosine between the question and its top-``k`` retrieved entities (§6.1, App. G).

    Both sides are L2-normalised here, so unnormalised embeddings are fine.
    None when the ranking has no entities or the index no entity embeddings.

    Shapes:
        question_embedding: (d,); index.entity_embeddings: (E, d).
    """
    if not ranking.entity_ids or index.entity_embeddings is None:
        return None
    ents = np.asarray(index.entity_embeddings[np.asarray(ranking.entity_ids[:k])], dtype=np.float64)  # (k, d)
    q = np.asarray(question_embedding, dtype=np.float64).ravel()  # (d,)
    if q.shape[0] != ents.shape[1]:
        raise ValueError(f"question embedding has dimension {q.shape[0]} but entity embeddings {ents.shape[1]}")
    ents /= np.maximum(np.linalg.norm(ents, axis=1, keepdims=True), 1e-12)
    q /= max(float(np.linalg.norm(q)), 1e-12)
    return float((ents @ q).mean())


def entity_hop_distance(
    ranking: Ranking,
    index: KGIndex,
    k: int = ENTITY_K,
    cutoff: int = BFS_CUTOFF,
    distances: Distances | None = None,
) -> float | None:
    """Mean hop distance from the seeds to the reachable top-``k`` retrieved entities (§6.2, App. G).

    Distances come from a BFS from all seeds with ``cutoff`` hops (10 in
    App. G); entities beyond it are unreachable and left out. None when the
    ranking has no entities, the question no seeds, or no entity is reachable.
    ``distances`` (from :func:`seed_distances`) saves the BFS.
    """
    if not ranking.entity_ids:
        return None
    dist = seed_distances(index, ranking.question_id, cutoff) if distances is None else distances
    reached = _reached(dist, ranking.entity_ids[:k])
    return float(np.mean(reached)) if reached else None
