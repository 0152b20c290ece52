"""A training-free prior over the entities that a trained retriever corrects (glmrag's own, not in the papers).

A retriever trained on a few hundred questions starts from noise: the untrained GFM-RAG+ demo ranked the
same top-10 passages for all 20 of its validation questions (``benchmarks/RESULTS.md``, "Its learning
rate"), so a small run's first epochs are spent catching up with a baseline that needs no training. With a
prior, the model's entity logits are ``w * log p(e | q) + c(e | q)``: ``p`` a training-free ranking of the
entities, ``w`` a learned scalar that starts at 1 and ``c`` the network's correction, whose last layer
starts at zero. The untrained model then ranks exactly as its prior does (with the ``softmax_sum`` passage
ranker of :mod:`glmrag.index.ranking`, ``softmax(logits)`` summed over each passage's entities), and
whatever training changes is what it adds to the prior.

With ``dense_weight`` set, passages are then scored ``log(sum_{e in p} softmax(logits)_e) + b cos(q, p)``
(:func:`passage_logits`): the entity ranking's passage mass fused with dense retrieval's
question-passage cosine, ``b`` learned from ``dense_weight``. The untrained model is then the fusion of PPR
and dense retrieval, and training is judged against that fusion.

The one entity prior here is HippoRAG's Personalized PageRank (:mod:`glmrag.retrievers.ppr`), computed in torch
from the GNN's own inputs: the restart is the question's seed weights ``1 / |passages mentioning e|``
normalised to sum to 1 (the GNN's boundary condition is the same vector), the walk the undirected
multigraph of the KG's triples with synonym edges (a self-loop counted once), damping 0.5 (HippoRAG), mass
on entities without edges restarting, as in :mod:`glmrag.graph.pagerank`. A question without linked
entities restarts uniformly (the PPR retriever's global-PageRank fallback).
"""

from __future__ import annotations

import warnings
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from glmrag.graph.pagerank import HIPPORAG_DAMPING, iterations_for
from glmrag.index.kg import KGIndex
from glmrag.nn.graph_inputs import GraphInputs

PRIORS = ("ppr",)
"""Training-free priors a retriever can start from (``ppr``: HippoRAG's Personalized PageRank)."""
LOG_FLOOR = 1e-30
"""Smallest probability whose log is taken: an entity the walk never reaches scores ``log(1e-30) ≈ -69``."""
MASS_FLOOR = 1e-12
"""Added to a passage's entity mass before its log: a passage the prior gives no mass still ranks by cosine."""
CACHE_MIB = 256.0
"""Log-prior rows an :class:`EntityPrior` keeps (:class:`PriorRows`), MiB: 1,130 questions of the 2Wiki test KG
(59,281 entities, 232 KiB a row), every training question of an epoch at the papers' sizes."""


@dataclass(frozen=True)
class PriorSettings:
    """Which prior a retriever's logits start from, and how it is weighted (``model.prior``)."""

    kind: str = "ppr"
    """The prior (:data:`PRIORS`)."""
    damping: float = HIPPORAG_DAMPING
    """PPR damping: the probability of following an edge (:data:`~glmrag.graph.pagerank.HIPPORAG_DAMPING`)."""
    tol: float = 1e-6
    """L1 tolerance of the power iteration (the PPR retriever's)."""
    learn_weight: bool = True
    """Learn the prior's weight ``w`` (starting at 1) and the dense weight ``b``; false keeps both fixed."""
    dense_weight: float | None = None
    """None: passages rank by their entity mass alone. A number: the start of ``b`` in the passage score
    ``log(mass) + b cos(q, p)`` (see the module docstring)."""

    def __post_init__(self) -> None:
        if self.kind not in PRIORS:
            raise ValueError(f"prior.kind must be one of {PRIORS}, got {self.kind!r}")
        if not 0.0 <= self.damping < 1.0:
            raise ValueError(f"prior.damping must lie in [0, 1), got {self.damping!r}")
        if not 0.0 < self.tol < 1.0:
            raise ValueError(f"prior.tol must lie in (0, 1), got {self.tol!r}")
        if not isinstance(self.learn_weight, bool):
            raise ValueError(f"prior.learn_weight must be true or false, got {self.learn_weight!r}")
        if self.dense_weight is not None and (
            isinstance(self.dense_weight, bool) or not isinstance(self.dense_weight, int | float)
        ):
            raise ValueError(f"prior.dense_weight must be null or a number, got {self.dense_weight!r}")

    @property
    def iterations(self) -> int:
        """Power iterations within ``tol`` of the fixed point (:func:`glmrag.graph.pagerank.iterations_for`)."""
        return iterations_for(self.damping, self.tol)


@dataclass(frozen=True)
class TensorWalk:
    """The random walk of one KG in torch (:class:`glmrag.graph.pagerank.Walk` holds it in SciPy for the retrievers):
    the transposed transition matrix and the dangling entities."""

    transition_t: torch.Tensor
    """(E, E) sparse CSR, ``transition_t[v, u] = Pr(u -> v)``: column ``u`` sums to 1 unless ``u`` is dangling."""
    dangling: torch.Tensor
    """(E,) bool: entities without edges, whose mass restarts."""


@dataclass(frozen=True)
class PriorKG:
    """What a prior reads of one KG beside the network's logits, built once per KG (:func:`prior_kg`)."""

    walk: TensorWalk
    """The KG's walk (:func:`index_walk`)."""
    passage_entities: torch.Tensor
    """(P, E) sparse CSR, 1 where a passage mentions an entity (:func:`passage_logits`'s)."""
    passage_emb: torch.Tensor | None
    """(P, d) unit passage embeddings of the dense term; None without one."""

    def to(self, device: torch.device | str) -> PriorKG:
        walk = TensorWalk(self.walk.transition_t.to(device), self.walk.dangling.to(device))
        emb = None if self.passage_emb is None else self.passage_emb.to(device)
        return PriorKG(walk, self.passage_entities.to(device), emb)


def sparse_csr(indices: torch.Tensor, values: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """A sparse CSR matrix from COO ``indices`` (2, M) and ``values`` (M,); repeated entries add up.

    CSR, because its products with a dense matrix are about 20x faster than COO's on a CPU (measured on the
    2Wiki slice's PPR walk); torch warns that CSR support is in beta, which is silenced here.
    """
    coo = torch.sparse_coo_tensor(indices, values, size, check_invariants=True).coalesce()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return coo.to_sparse_csr()


def walk_of(graph: GraphInputs) -> TensorWalk:
    """The walk on the undirected multigraph of ``graph``'s triples (``edge_index`` holds each triple once per
    direction; the second copy of a self-loop is dropped, as networkx and the PPR retriever count it once)."""
    return edge_walk(graph.edge_index, graph.num_nodes)


def index_walk(index: KGIndex) -> TensorWalk:
    """:func:`walk_of` the KG of ``index``, without the GNN's relation and node features (the GLM's prior)."""
    triples = torch.as_tensor(index.triples, dtype=torch.long).reshape(-1, 3)
    head, tail = triples[:, 0], triples[:, 2]
    return edge_walk(torch.stack([torch.cat([head, tail]), torch.cat([tail, head])]), index.num_entities)


def prior_kg(index: KGIndex, passage_emb: torch.Tensor | None = None) -> PriorKG:
    """The :class:`PriorKG` of ``index``, with ``passage_emb`` (P, d) for a dense term."""
    return PriorKG(index_walk(index), passage_entity_matrix(index), passage_emb)


def gold_passage_mask(index: KGIndex, gold: Sequence[Sequence[str]]) -> torch.Tensor:
    """Shapes: ``gold`` B lists of passage ids -> (B, P) bool, True at each question's gold passages in ``index``."""
    out = torch.zeros(len(gold), index.num_passages, dtype=torch.bool)
    for row, ids in enumerate(gold):
        out[row, [index.passage_position[p] for p in ids if p in index.passage_position]] = True
    return out


def passage_entity_matrix(index: KGIndex) -> torch.Tensor:
    """(P, E) sparse CSR float32, 1 where a passage mentions an entity: ``index.passage_entities`` in torch."""
    matrix = index.passage_entities.tocoo()
    rows_cols = torch.from_numpy(np.vstack([matrix.row, matrix.col]).astype(np.int64))
    return sparse_csr(rows_cols, torch.ones(matrix.nnz), matrix.shape)


def edge_walk(edge_index: torch.Tensor, num_nodes: int) -> TensorWalk:
    """The walk of :func:`walk_of` from ``edge_index`` (2, 2T): each triple ``h -> t``, then each ``t -> h``."""
    src, dst = edge_index  # (2T,) each
    half = src.shape[0] // 2
    keep = torch.ones_like(src, dtype=torch.bool)
    keep[half:] = src[half:] != dst[half:]
    src, dst = src[keep], dst[keep]
    degree = torch.zeros(num_nodes, device=src.device).index_add_(0, src, torch.ones_like(src, dtype=torch.float))
    weight = 1.0 / degree[src]  # (M,) Pr(src -> dst); parallel edges add up in the sparse sum
    return TensorWalk(sparse_csr(torch.stack([dst, src]), weight, (num_nodes, num_nodes)), degree == 0)


def ppr_probabilities(walk: TensorWalk, seed_weight: torch.Tensor, damping: float, iterations: int) -> torch.Tensor:
    """Personalized PageRank of every entity from each question's seeds.

    ``x <- damping * (T x + (dangling . x) r) + (1 - damping) r`` from ``x = r``, ``T`` the walk's transition
    and ``r`` the normalised seed weights (uniform when a row has none).

    Shapes: **seed_weight** ``(B, E)`` -> ``(B, E)`` float32 rows summing to 1.
    """
    restart = seed_weight.float().t()  # (E, B)
    total = restart.sum(0, keepdim=True)  # (1, B)
    uniform = torch.full_like(restart, 1.0 / restart.shape[0])
    restart = torch.where(total > 0, restart / total.clamp_min(1e-30), uniform).contiguous()
    dangling = walk.dangling.to(restart.dtype).unsqueeze(0)  # (1, E): a product, not a boolean index, which
    x = restart  # would wait for the device in every iteration
    for _ in range(iterations):
        leaked = dangling @ x  # (1, B): mass on entities without edges restarts
        x = damping * (walk.transition_t @ x + leaked * restart) + (1.0 - damping) * restart  # (E, B)
    return x.t().contiguous()  # (B, E)


def passage_logits(
    entity_logits: torch.Tensor,
    passage_entities: torch.Tensor,
    dense_weight: torch.Tensor | None = None,
    question_emb: torch.Tensor | None = None,
    passage_emb: torch.Tensor | None = None,
) -> torch.Tensor:
    """``log(sum_{e in p} softmax(entity_logits)_e + MASS_FLOOR)``, plus ``dense_weight * cos(q, p)`` when given.

    Shapes: **entity_logits** ``(B, E)``, **passage_entities** ``(P, E)`` sparse, **dense_weight** ``()``,
    **question_emb** ``(B, d)`` and **passage_emb** ``(P, d)`` unit rows -> ``(B, P)``.
    """
    probs = torch.softmax(entity_logits.float(), dim=-1)  # (B, E); -inf -> 0
    logits = torch.log((passage_entities @ probs.t()).t() + MASS_FLOOR)  # (B, P)
    if dense_weight is None:
        return logits
    if question_emb is None or passage_emb is None:
        raise ValueError("the dense term (prior.dense_weight) needs question_emb and passage_emb")
    return logits + dense_weight * (question_emb.float() @ passage_emb.float().t())  # (B, P)


class PriorRows:
    """``log p(e | q)`` rows computed before, per walk and seed row: the prior is fixed per (KG, question), so
    after the first epoch a training step and an evaluation read it instead of walking ~21 sparse products.

    A row is keyed by its walk (identity, as :func:`glmrag.nn.rspmm.relational_csr` keys its edges) and by
    the seed row's content (its non-zero entities and weights), so a question's prior is found whichever
    batch brings it, and a changed seed vector or walk is computed anew. Looking the rows up reads the seeds
    on the host once per call (one device sync per forward; none inside the walk). Least recently used
    rows go beyond ``max_mib``; rows live on the walk's device.
    """

    def __init__(self, max_mib: float = CACHE_MIB) -> None:
        self.max_bytes = int(max_mib * 2**20)
        self.rows: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self.walks: dict[int, weakref.ref] = {}
        self.nbytes = 0
        self.computed = 0
        """Rows computed so far (the tests count them)."""

    def __call__(self, walk: TensorWalk, seed_weight: torch.Tensor, compute) -> torch.Tensor:
        """The rows of ``compute(walk, seed_weight[missing])`` for every row of ``seed_weight``, from the cache where
        they are there. Shapes: **seed_weight** ``(B, E)`` -> ``(B, E)``."""
        ref = self.walks.get(id(walk))
        if ref is None or ref() is not walk:  # a new walk, or a freed one's id reused
            self.walks[id(walk)] = weakref.ref(walk)
            self._drop(id(walk))
        keys = [(id(walk), *row_key) for row_key in seed_keys(seed_weight)]
        rows: dict[tuple, torch.Tensor] = {}
        for key in keys:
            if key in self.rows:
                self.rows.move_to_end(key)
                rows[key] = self.rows[key]
        missing = [b for b, key in enumerate(keys) if key not in rows]
        if missing:
            fresh = compute(walk, seed_weight[missing])  # (m, E)
            self.computed += len(missing)
            for b, row in zip(missing, fresh, strict=True):
                rows[keys[b]] = row
                self._put(keys[b], row)
        return torch.stack([rows[key] for key in keys])  # (B, E)

    def __getstate__(self) -> dict:
        """A copy or pickle starts empty: the keys name walks of this process."""
        return {"max_bytes": self.max_bytes, "rows": OrderedDict(), "walks": {}, "nbytes": 0, "computed": 0}

    def _put(self, key: tuple, row: torch.Tensor) -> None:
        if key in self.rows:  # a batch holding the same question twice
            return
        row = row.clone()  # not a view that keeps the whole batch alive
        self.rows[key] = row
        self.nbytes += row.numel() * row.element_size()
        while self.nbytes > self.max_bytes and len(self.rows) > 1:
            _, old = self.rows.popitem(last=False)
            self.nbytes -= old.numel() * old.element_size()

    def _drop(self, walk_id: int) -> None:
        for key in [key for key in self.rows if key[0] == walk_id]:
            old = self.rows.pop(key)
            self.nbytes -= old.numel() * old.element_size()


def seed_keys(seed_weight: torch.Tensor) -> list[tuple[bytes, bytes]]:
    """Each row's non-zero columns and values as bytes (one copy to the host). Shapes: ``(B, E)`` -> B keys."""
    rows, cols = seed_weight.nonzero(as_tuple=True)  # (nnz,) each
    values = seed_weight[rows, cols].float().cpu().numpy()
    rows, cols = rows.cpu().numpy(), cols.cpu().numpy()
    bounds = np.searchsorted(rows, np.arange(seed_weight.shape[0] + 1))  # nonzero() is row-major
    return [
        (cols[start:stop].tobytes(), values[start:stop].tobytes())
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True)
    ]


class EntityPrior(nn.Module):
    """``w * log p(e | q)``: the weighted log-prior of every entity (see the module docstring).

    Shapes: **seed_weight** ``(B, E)`` -> ``(B, E)`` float32 (finite: ``log`` of at least :data:`LOG_FLOOR`).
    """

    def __init__(self, settings: PriorSettings) -> None:
        super().__init__()
        self.settings = settings
        self.weight = nn.Parameter(torch.ones(()), requires_grad=settings.learn_weight)
        self.register_parameter("dense_weight", None)  # b of the dense term, when prior.dense_weight is set
        if settings.dense_weight is not None:
            start = torch.tensor(float(settings.dense_weight))
            self.dense_weight = nn.Parameter(start, requires_grad=settings.learn_weight)
        self._walks: dict[int, tuple[torch.Tensor, TensorWalk]] = {}  # id(edge_index) -> (edge_index, its walk)
        self.cache = PriorRows()

    def walk(self, graph: GraphInputs) -> TensorWalk:
        """The walk of ``graph``, built once per ``edge_index`` tensor (a module keeps one per KG and device)."""
        cached = self._walks.get(id(graph.edge_index))
        if cached is None or cached[0] is not graph.edge_index:
            cached = self._walks[id(graph.edge_index)] = (graph.edge_index, walk_of(graph))
        return cached[1]

    def forward(self, graph: GraphInputs, seed_weight: torch.Tensor) -> torch.Tensor:
        return self.on_walk(self.walk(graph), seed_weight)

    def on_walk(self, walk: TensorWalk, seed_weight: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` on a walk the caller keeps (the GLM's, :func:`index_walk`); each (walk, seed row)
        is walked once (:class:`PriorRows`)."""
        with torch.no_grad():
            log_p = self.cache(walk, seed_weight, self.log_prior)  # (B, E)
        return self.weight * log_p  # (B, E)

    def log_prior(self, walk: TensorWalk, seed_weight: torch.Tensor) -> torch.Tensor:
        """``log p(e | q)`` of the seeds' PPR, uncached. Shapes: **seed_weight** ``(B, E)`` -> ``(B, E)``."""
        p = ppr_probabilities(walk, seed_weight, self.settings.damping, self.settings.iterations)
        return p.clamp_min(LOG_FLOOR).log()

    @property
    def dense(self) -> bool:
        """Whether passages are scored with the dense term (``dense_weight`` set)."""
        return self.dense_weight is not None
