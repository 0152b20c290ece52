"""Fused relational aggregation, ULTRA's ``rspmm`` in plain PyTorch: no ``(E, B, H)`` message tensor.

GFM-RAG's GNN sums DistMult messages, ``out_v = sum_{(u, r, v)} h_u * rel_r`` over the edges ``u -> v``
(``edge_index[0] -> edge_index[1]``, PyG's convention; GFM-RAG's C++ ``rspmm`` writes the rows of
``edge_index[0]`` instead: see :func:`rspmm`). A PyG ``message`` would build the ``(E, B, H)`` messages of every
layer and keep them for backward (1.26 GiB per layer on the 2Wiki test KG at hidden 512, batch 1); ULTRA fuses
the sum in C++. :class:`RelationalSpMM` does the same with stock operators: a segment reduction over the edges
in CSR order, in chunks of :data:`CHUNK_MIB`, sorted by target for the forward, by source for the gradient wrt
``h`` and by relation for the gradient wrt ``rel``; it saves only ``h`` and ``rel``.

Every sum is deterministic (the same bits on repeated runs): each output row adds its edges in CSR order, on
a CPU with ``index_add_`` (serial over the edges) and on other devices with ``torch.segment_reduce`` over the
row pointers (:data:`SEGMENT_SUM`), which computes each row's sum in one pass with no atomic adds. Sums
accumulate in float32 whatever the input dtype (bf16 / fp16 under autocast), as GFM-RAG's CUDA kernel does,
and are cast back at the end. Memory: the output and gradients, about three chunk-sized temporaries, and
three sorted copies of the edge list (72 bytes per edge plus the row pointers, cached per graph). Kernels:
:data:`KERNELS` (``compiled`` is not the default: see :data:`KERNEL`).
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

from glmrag.nn.fixed_cache import tensor_version

CHUNK_MIB = {"cpu": 2.0, "cuda": 256.0}
"""Per-chunk budget of the ``(chunk, B, H)`` temporaries, MiB, by device type (others use the CPU's).

On the CPU a chunk of 1-4 MiB stays in the caches (2-core AMD EPYC, L2 512 KiB, L3 8 MiB, one thread, B = 1,
eager forward of one layer, median of 7, 2026-12-05): on the real 2Wiki test KG (512k edges) 0.328 / 0.300 /
0.296 CPU s at 1 / 2 / 4 MiB, on ``bench_rspmm_peer``'s synthetic KG 0.295 / 0.281 / 0.297. On a GPU each chunk
costs a few kernel launches, so chunks are larger (not measured: no GPU)."""
KERNELS = ("eager", "compiled")
KERNEL = "eager"
"""The default kernel: ``eager`` (chunked PyTorch ops) or ``compiled`` (the same chunk body through
``torch.compile``, which fuses gather, product and scatter into one loop). On the CPU above, one thread,
``compiled`` sums a 2Wiki-size layer in 0.20 CPU s against eager's 0.26 s (GFM-RAG's C++ rspmm: 0.23 s;
``benchmarks/bench_rspmm_peer.py``), but a GNN training step gains only 2-14% (dense matmuls dominate) for 5-9 s
of compiling per process and shape class and a C++ toolchain, so it is not the default
(``benchmarks/scaling.md``). It sums with atomic adds on a GPU, so it is deterministic only on a CPU."""
COMPILED_CHUNK_MIB = 256.0
"""Chunk budget of the compiled kernel: it keeps no chunk temporaries once fused, so chunks only bound the
memory of a backend that does not fuse."""
CACHE_SIZE = 8
"""Edge orders kept by :func:`relational_csr` (one per graph; evicted when the edge tensors die)."""
SEGMENT_SUM = {"cpu": "index_add"}
"""How a chunk's edge values are summed into their rows, by device type (others: ``segment``). ``index_add``:
``out.index_add_(0, rows, values)``, which on a CPU adds the edges one after another (deterministic, and 1.5x
faster than ``segment`` there: 0.30 against 0.45 CPU s for a 2Wiki-size layer, one thread); ``segment``:
``torch.segment_reduce`` over the CSR row pointers, one sum per row without atomics, so deterministic by
construction on a GPU too, where ``index_add_`` uses atomic adds whose order varies."""
ACCUMULATE = {torch.bfloat16: torch.float32, torch.float16: torch.float32}
"""The dtype sums accumulate in, by input dtype (others: their own)."""


class Chunk(NamedTuple):
    """Edges ``start:stop`` of an :class:`EdgeOrder`: views of its three index tensors."""

    start: int
    stop: int
    gather: torch.Tensor
    edge_type: torch.Tensor
    scatter: torch.Tensor


@dataclass(frozen=True, eq=False)
class EdgeOrder:
    """The edges sorted by one key (CSR order), with the key's row pointers.

    Shapes: **gather**, **edge_type**, **scatter**: ``(E,)`` long; **ptr** ``(K + 1,)`` long, the edges of key
    ``k`` are ``ptr[k]:ptr[k + 1]``. The key is ``scatter`` (the rows a sum writes) or, in
    :attr:`RelationalCSR.by_type`, ``edge_type``.
    """

    gather: torch.Tensor
    edge_type: torch.Tensor
    scatter: torch.Tensor
    ptr: torch.Tensor
    _chunks: dict[int, tuple[Chunk, ...]] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return self.gather.numel()

    def chunks(self, size: int) -> tuple[Chunk, ...]:
        """The edges in chunks of ``size``, cut once per size: a 2Wiki-size layer walks ~650 chunks per sum, and
        slicing three tensors for each on every call cost 3% of an eager forward at B = 1 (``bench_rspmm_peer``)."""
        cut = self._chunks.get(size)
        if cut is None and not len(self):
            cut = self._chunks[size] = ()  # split() would give one empty piece
        if cut is None:
            starts = range(0, len(self), size)
            cut = self._chunks[size] = tuple(
                Chunk(start, min(start + size, len(self)), *parts)
                for start, *parts in zip(
                    starts, self.gather.split(size), self.edge_type.split(size), self.scatter.split(size), strict=True
                )
            )
        return cut


class RelationalCSR(NamedTuple):
    """One graph's edges in the three orders :class:`RelationalSpMM` walks (build with :func:`relational_csr`)."""

    by_target: EdgeOrder
    """(source, type, target), sorted by target: the forward."""
    by_source: EdgeOrder
    """(target, type, source), sorted by source: the gradient wrt the node states."""
    by_type: EdgeOrder
    """(source, type, target), sorted by type: the gradient wrt the relations."""
    num_nodes: int


def build_csr(edge_index: torch.Tensor, edge_type: torch.Tensor, num_nodes: int) -> RelationalCSR:
    """Sort the edges by target, by source and by type (stable, so parallel edges keep their order).

    Shapes: **edge_index** ``(2, E)`` (source, target), **edge_type** ``(E,)``.
    """
    src, dst = edge_index[0], edge_index[1]
    num_types = int(edge_type.max()) + 1 if edge_type.numel() else 0

    def order(gather: torch.Tensor, scatter: torch.Tensor, key: torch.Tensor, num_keys: int) -> EdgeOrder:
        perm = torch.sort(key, stable=True).indices  # (E,)
        ptr = torch.zeros(num_keys + 1, dtype=torch.long, device=key.device)
        ptr[1:] = torch.cumsum(torch.bincount(key, minlength=num_keys), 0)  # (K + 1,)
        return EdgeOrder(gather[perm].contiguous(), edge_type[perm].contiguous(), scatter[perm].contiguous(), ptr)

    return RelationalCSR(
        order(src, dst, dst, num_nodes),
        order(dst, src, src, num_nodes),
        order(src, dst, edge_type, num_types),
        num_nodes,
    )


_CACHE: OrderedDict[tuple, tuple[weakref.ref, weakref.ref, RelationalCSR]] = OrderedDict()


def relational_csr(edge_index: torch.Tensor, edge_type: torch.Tensor, num_nodes: int) -> RelationalCSR:
    """:func:`build_csr`, cached per edge tensor pair: a graph's layers and batches share one sort.

    The key is the tensors' identity and version, so an edge list edited in place is sorted again (inference
    tensors have no version: edit those out of place); an entry goes when either tensor is freed, and at most
    :data:`CACHE_SIZE` are kept.
    """
    key = (id(edge_index), id(edge_type), tensor_version(edge_index), tensor_version(edge_type), num_nodes)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is edge_index and hit[1]() is edge_type:
        _CACHE.move_to_end(key)
        return hit[2]
    csr = build_csr(edge_index, edge_type, num_nodes)

    def evict(_ref: weakref.ref, key: tuple = key) -> None:
        _CACHE.pop(key, None)

    _CACHE[key] = (weakref.ref(edge_index, evict), weakref.ref(edge_type, evict), csr)
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return csr


def edges_per_chunk(row_elements: int, element_size: int, device: torch.device, chunk_mib: float | None = None) -> int:
    """Edges per chunk: ``chunk_mib`` MiB (default :data:`CHUNK_MIB` of the device) of ``(B, H)`` rows."""
    mib = CHUNK_MIB.get(device.type, CHUNK_MIB["cpu"]) if chunk_mib is None else chunk_mib
    return max(1, math.floor(mib * 2**20 / max(1, row_elements * element_size)))


def _add_segments(out: torch.Tensor, keys: torch.Tensor, ptr: torch.Tensor, start: int, values: torch.Tensor) -> None:
    """``out[keys[e]] += values[e]`` for the edges ``start : start + len(values)`` of a CSR order (``keys`` those
    edges' ascending keys, ``ptr`` the order's row pointers), deterministically (:data:`SEGMENT_SUM`)."""
    stop = start + values.shape[0]
    if SEGMENT_SUM.get(out.device.type, "segment") == "index_add":
        out.index_add_(0, keys, values)
        return
    first, last = int(keys[0]), int(keys[-1]) + 1  # the rows this chunk touches (one sync a chunk)
    lengths = ptr[first + 1 : last + 1].clamp(max=stop) - ptr[first:last].clamp(min=start)  # (rows,)
    out[first:last] += torch.segment_reduce(values, "sum", lengths=lengths, axis=0, unsafe=True)


def _aggregate(x, relation, edges: EdgeOrder, num_rows: int, chunk: int, kernel: str) -> torch.Tensor:
    """``out[scatter_e] += x[gather_e] * relation[type_e]``: ``(N, M, H)``, ``(R, H)`` -> ``(num_rows, M, H)`` in
    the accumulation dtype (:data:`ACCUMULATE`)."""
    acc = ACCUMULATE.get(x.dtype, x.dtype)
    out = torch.zeros(num_rows, *x.shape[1:], dtype=acc, device=x.device)  # (num_rows, M, H)
    if kernel == "compiled":
        if _compiled_walk(_aggregate_chunk, chunk, out, (x, relation), edges):
            return out
        out.zero_()  # chunks a failed compile may have added
    rows = out.new_empty(min(chunk, len(edges)), *x.shape[1:])  # (chunk, M, H), reused
    rels = out.new_empty(rows.shape[0], relation.shape[1])  # (chunk, H), reused
    for part in edges.chunks(chunk):
        size = part.stop - part.start
        msg = _gather(x, part.gather, rows[:size])  # (c, M, H)
        rel = _gather(relation, part.edge_type, rels[:size])  # (c, H)
        _add_segments(out, part.scatter, edges.ptr, part.start, msg.mul_(rel.unsqueeze(1)))
    return out


def _relation_grad(x, grad_out, edges: EdgeOrder, num_types: int, chunk: int, kernel: str) -> torch.Tensor:
    """``d rel[type_e] += sum_batch x[source_e] * grad_out[target_e]``: ``(N, M, H)`` twice -> ``(R, H)`` in the
    accumulation dtype; ``edges`` sorted by type."""
    acc = ACCUMULATE.get(x.dtype, x.dtype)
    grad = torch.zeros(num_types, x.shape[-1], dtype=acc, device=x.device)  # (R, H)
    if kernel == "compiled":
        if _compiled_walk(_relation_grad_chunk, chunk, grad, (x, grad_out), edges):
            return grad
        grad.zero_()  # chunks a failed compile may have added
    rows = grad.new_empty(min(chunk, len(edges)), *x.shape[1:])  # (chunk, M, H), reused
    grads = torch.empty_like(rows)  # (chunk, M, H), reused
    for part in edges.chunks(chunk):
        size = part.stop - part.start
        prod = _gather(x, part.gather, rows[:size])  # (c, M, H)
        prod.mul_(_gather(grad_out, part.scatter, grads[:size]))
        _add_segments(grad, part.edge_type, edges.ptr, part.start, prod.sum(1) if prod.shape[1] > 1 else prod[:, 0])
    return grad


def _gather(table: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``table[index]`` into ``out`` (the accumulation dtype), upcast on the way when ``table`` is narrower."""
    if table.dtype == out.dtype:
        return torch.index_select(table, 0, index, out=out)
    return out.copy_(torch.index_select(table, 0, index))


def _aggregate_chunk(out, x, relation, gather, edge_type, scatter) -> None:
    """The compiled kernel's chunk: inductor fuses gather, product and scatter into one loop (atomic adds on a
    GPU: this kernel is not deterministic there)."""
    msg = torch.index_select(x, 0, gather).to(out.dtype) * torch.index_select(relation, 0, edge_type)[:, None]
    out.index_add_(0, scatter, msg)


def _relation_grad_chunk(grad, x, grad_out, gather, edge_type, scatter) -> None:
    prod = torch.index_select(x, 0, gather).to(grad.dtype) * torch.index_select(grad_out, 0, scatter)
    grad.index_add_(0, edge_type, prod.sum(1))


_COMPILED: dict = {}


def _compiled_walk(body, chunk: int, target: torch.Tensor, tables: tuple, edges: EdgeOrder) -> bool:
    """Run ``torch.compile(body)`` (dynamic shapes) over the chunks; False, with a warning (once), when it cannot
    be compiled (no C++ compiler, an unsupported device or dtype): the caller then runs the eager kernel."""
    if body not in _COMPILED:
        _COMPILED[body] = torch.compile(body, dynamic=True)
    compiled = _COMPILED[body]
    if compiled is None:
        return False
    from torch._dynamo.exc import BackendCompilerFailed, InternalTorchDynamoError

    tables = tuple(t.detach() for t in tables)  # plain tensors: no guards on requires_grad or a view's base
    try:
        for part in edges.chunks(chunk):
            compiled(target, *tables, part.gather, part.edge_type, part.scatter)
    except (BackendCompilerFailed, InternalTorchDynamoError) as err:
        warnings.warn(f"torch.compile of {body.__name__} failed; rspmm uses its eager kernel: {err}", stacklevel=3)
        _COMPILED[body] = None
        return False
    return True


class RelationalSpMM(torch.autograd.Function):
    """``out_v = sum_{(u, r, v)} x_u * relation_r`` with a chunked forward and backward (see the module doc).

    Backward: ``d x_u = sum_{(u, r, v)} d out_v * relation_r`` (the same walk over the edges sorted by source)
    and ``d relation_r = sum_{(u, r, v), batch} x_u * d out_v`` (over the edges sorted by type). Every sum
    accumulates in :data:`ACCUMULATE`'s dtype; outputs and gradients come back in their inputs' dtypes.

    Shapes: **x** ``(N, M, H)``, **relation** ``(R, H)``, same dtype -> ``(N, M, H)``.
    """

    @staticmethod
    def forward(ctx, x, relation, csr: RelationalCSR, chunk: int, kernel: str) -> torch.Tensor:
        ctx.save_for_backward(x, relation)
        ctx.csr, ctx.chunk, ctx.kernel = csr, chunk, kernel
        return _aggregate(x, relation, csr.by_target, csr.num_nodes, chunk, kernel).to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        x, relation = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_x = grad_rel = None
        if ctx.needs_input_grad[0]:
            grad_x = _aggregate(grad_out, relation, ctx.csr.by_source, x.shape[0], ctx.chunk, ctx.kernel).to(x.dtype)
        if ctx.needs_input_grad[1]:
            grad_rel = _relation_grad(x, grad_out, ctx.csr.by_type, relation.shape[0], ctx.chunk, ctx.kernel)
            grad_rel = grad_rel.to(relation.dtype)
        return grad_x, grad_rel, None, None, None


def rspmm(
    x: torch.Tensor,
    relation: torch.Tensor,
    edge_index: torch.Tensor,
    edge_type: torch.Tensor,
    chunk_mib: float | None = None,
    csr: RelationalCSR | None = None,
    kernel: str | None = None,
) -> torch.Tensor:
    """``out_v = sum_{(u, r, v)} x_u * relation_r`` over the edges ``u -> v`` of type ``r``, no messages stored.

    ``csr`` defaults to the cached :func:`relational_csr` of the edge tensors; ``kernel`` to :data:`KERNEL`;
    ``chunk_mib`` to :data:`CHUNK_MIB` of the device (eager) or :data:`COMPILED_CHUNK_MIB` (compiled).

    Shapes:
        - **x**: ``(N, *, H)``, any batch shape ``*``; **relation**: ``(R, H)``
        - **edge_index**: ``(2, E)`` (source, target), **edge_type**: ``(E,)`` in ``[0, R)``
        - **output**: ``(N, *, H)``
    """
    num_nodes, hidden = x.shape[0], x.shape[-1]
    if relation.dim() != 2 or relation.shape[1] != hidden:
        raise ValueError(f"relation must be (R, {hidden}) to match x {tuple(x.shape)}, got {tuple(relation.shape)}")
    kernel = KERNEL if kernel is None else kernel
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if csr is None:
        csr = relational_csr(edge_index, edge_type, num_nodes)
    dtype = torch.promote_types(x.dtype, relation.dtype)
    flat = x.to(dtype).reshape(num_nodes, math.prod(x.shape[1:-1]), hidden)  # (N, M, H)
    if chunk_mib is None and kernel == "compiled":
        chunk_mib = COMPILED_CHUNK_MIB
    chunk = edges_per_chunk(flat.shape[1] * hidden, flat.element_size(), x.device, chunk_mib)
    out = RelationalSpMM.apply(flat.contiguous(), relation.to(dtype).contiguous(), csr, chunk, kernel)  # (N, M, H)
    return out.view(x.shape[:-1] + (hidden,))  # (N, *, H)
