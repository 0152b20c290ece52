"""Addressing-head selection on unlabeled probes (Read the Route §3, App. A.2), cached per reader model.

§3 "selects eight heads from 1,152 using 600 unlabeled probes": here the heads whose pointer score ranks
the probe's target entity first (strictly: a tie is no hit) most often. Probes come from the hypergraph
itself, so they need no labels (:func:`make_probes`). Heads are selected on half of the probes and their
hit rate is reported on the other, held-out half, as §3's "59.0% of held-out probes" is
(:func:`select_heads`). The selection is cached per reader and settings, not per corpus (the paper keeps
the heads across benchmarks, App. A), with the LLM usage it cost.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from glmrag.data.types import Passage
from glmrag.graph.hypergraph import Hypergraph, mention_spans
from glmrag.io import load_cached_json, write_cache_json
from glmrag.llm.base import Usage
from glmrag.retrievers.hyperaddress.reader_pointers import Reader, build_context, pointer_scores
from glmrag.retrievers.hyperaddress.settings import SteeringSettings

log = logging.getLogger(__name__)

NUM_HEADS = SteeringSettings.num_heads
"""Addressing heads kept (Read the Route §3: "eight heads from 1,152"); one home, :class:`SteeringSettings`."""
NUM_PROBES = SteeringSettings.probes
"""Probes scored (§3 uses 600); one home, :class:`SteeringSettings`."""


@dataclass(frozen=True)
class HeadSelection:
    reader: str
    heads: list[tuple[int, int]]
    """Selected (layer, head) pairs, best first."""
    hit_rate: list[float]
    """Fraction of selection probes on which each selected head ranks the target first (in-sample)."""
    probes: int
    """Selection probes scored."""
    held_out_hit_rate: list[float]
    """Fraction of held-out probes on which each selected head ranks the target first (§3's figure)."""
    held_out_probes: int
    """Held-out probes scored."""
    cost: dict[str, float] | None = None
    """LLM usage of the selection passes when they ran (:meth:`~glmrag.llm.base.Usage.cost`); None without an
    LLM behind the reader."""
    from_cache: bool = dataclasses.field(default=False, compare=False)
    """Read from the cache in this process (so none of :attr:`cost` was spent here)."""


def _mask(text: str, name: str) -> str | None:
    spans = mention_spans(text, name)
    if not spans:
        return None
    for a, b in reversed(spans):
        text = text[:a] + "it" + text[b:]
    return text


def make_probes(
    graph: Hypergraph, passage: Callable[[int], Passage], probes: int, context_passages: int = 4, seed: int = 0
) -> list[tuple[list[tuple[int, Passage, list[tuple[int, str]]]], str, int]]:
    """Up to ``probes`` probes: (context passages with their entities, question, target entity id).

    A probe takes a target entity ``e`` in at least two passages and two of its incidences ``(p_ctx, e)``,
    ``(p_desc, e)``. The context is ``p_ctx`` (which names ``e``) and ``context_passages - 1`` random passages
    that do not mention it, shuffled; the question is the description of ``e`` on ``(p_desc, e)`` with every
    mention of ``e`` replaced by "it", so the reader must resolve a described entity to a named one (the §3
    setting). A probe whose description or context passage does not name ``e`` verbatim is skipped.
    """
    rng = np.random.default_rng(seed)
    sizes = graph.edge_sizes()
    names = graph.entities
    targets = [e for e in np.flatnonzero(sizes >= 2) if sum(ch.isalpha() for ch in names[e]) >= 3]
    by_entity = np.argsort(graph.incidence_entity, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)])
    inc_p, inc_e = graph.incidence_passage, graph.incidence_entity

    def entities_of(p: int) -> list[tuple[int, str]]:
        return [(int(inc_e[i]), names[inc_e[i]]) for i in graph.incidences_of(p)]

    out = []
    for _ in range(20 * probes):
        if len(out) == probes or not targets:
            break
        e = int(rng.choice(targets))
        incidences = by_entity[starts[e] : starts[e + 1]]
        ctx_inc, desc_inc = rng.choice(incidences, 2, replace=False)
        question = _mask(graph.labels[desc_inc][0], names[e])
        p_ctx = int(inc_p[ctx_inc])
        context = passage(p_ctx)
        if question is None or not mention_spans(f"{context.title}\n{context.text}", names[e]):
            continue
        mentioning = set(inc_p[incidences].tolist())
        others = [p for p in rng.permutation(graph.num_passages)[: 4 * context_passages] if p not in mentioning]
        chosen = [p_ctx] + [int(p) for p in others[: context_passages - 1]]
        rng.shuffle(chosen)
        out.append(([(p, passage(p), entities_of(p)) for p in chosen], question, e))
    return out


def score_heads(reader: Reader, probes) -> tuple[np.ndarray, np.ndarray, int]:
    """Per head, top-1 hits and reciprocal-rank sums of the target, and the probes scored.

    Shapes: -> (H,), (H,), int; heads in :meth:`Reader.all_heads` order.
    """
    heads = reader.all_heads()
    hits, rr, used = np.zeros(len(heads)), np.zeros(len(heads)), 0
    for passages, question, target in probes:
        context = build_context(reader, passages, question)
        if target not in context.candidates:
            continue
        scores = pointer_scores(reader, context, heads).amax(dim=1).numpy()  # (H, C)
        t = context.candidates.index(target)
        rank = (scores > scores[:, t : t + 1]).sum(axis=1)  # (H,) 0 = no candidate above the target
        tied = (scores == scores[:, t : t + 1]).sum(axis=1) > 1  # (H,) another candidate level with it
        hits += (rank == 0) & ~tied
        rr += 1.0 / (rank + 1)
        used += 1
    return hits, rr, used


def select_heads(
    reader: Reader,
    graph: Hypergraph,
    passage: Callable[[int], Passage],
    num_heads: int = NUM_HEADS,
    probes: int = NUM_PROBES,
    context_passages: int = 4,
    seed: int = 0,
    cache_dir: str | Path | None = None,
) -> HeadSelection:
    """The ``num_heads`` heads ranking probe targets first most often; read from / written to ``cache_dir``.

    Every head is scored on every probe in one forward pass per probe. Heads are selected on the probes at
    even positions of the seeded list and their hit rate reported on the odd ones
    (:attr:`HeadSelection.held_out_hit_rate`); ties in hits go to the higher mean reciprocal rank, then to the
    earlier (layer, head). A hit is the target ranked first strictly: otherwise a head scoring every
    candidate the same would hit every probe. The cache file ``addressing-heads-<hash>.json`` is keyed by
    the reader's name and these settings and checksummed (:func:`glmrag.io.write_cache_json`).
    """
    settings = {
        "reader": reader.name,
        "num_heads": num_heads,
        "probes": probes,
        "context": context_passages,
        "split": "held-out",  # selections written before the held-out split are not reused
    }
    key = hashlib.sha256(json.dumps(settings | {"seed": seed}, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"addressing-heads-{key}.json" if cache_dir is not None else None
    stored = load_cached_json(path, "addressing-head selection") if path is not None else None
    if stored is not None:
        stored["heads"] = [tuple(h) for h in stored["heads"]]
        return HeadSelection(**stored, from_cache=True)
    before = _usage(reader)
    made = make_probes(graph, passage, probes, context_passages, seed)
    if not made:
        raise ValueError(
            f"no addressing-head probe could be made from the hypergraph ({graph.num_passages} passages): it needs "
            "entities named in two passages; select heads on a larger corpus or pass heads explicitly"
        )
    hits, rr, used = score_heads(reader, made[0::2])
    order = sorted(range(len(hits)), key=lambda h: (-hits[h], -rr[h], h))[:num_heads]
    held_hits, _, held_used = score_heads(reader, made[1::2])
    all_heads = reader.all_heads()
    selection = HeadSelection(
        reader.name,
        [all_heads[h] for h in order],
        [float(hits[h] / max(used, 1)) for h in order],
        used,
        [float(held_hits[h] / max(held_used, 1)) for h in order],
        held_used,
        _cost(reader, before),
    )
    log.info(
        "addressing heads of %s on %d probes: %s; held-out hit rate %s on %d probes",
        reader.name,
        used,
        selection.heads,
        selection.held_out_hit_rate,
        held_used,
    )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_cache_json(path, {k: v for k, v in asdict(selection).items() if k != "from_cache"})
    return selection


def _usage(reader: Reader) -> Usage | None:
    """Everything the reader's LLM has counted so far; None without an LLM."""
    return reader.llm.usage.total() if reader.llm is not None else None


def _cost(reader: Reader, before: Usage | None) -> dict[str, float] | None:
    """The cost of what the reader's LLM counted since ``before`` (one thread: only this selection)."""
    return _usage(reader).since(before).cost() if before is not None else None


def random_heads(reader: Reader, num_heads: int = NUM_HEADS, seed: int = 0) -> list[tuple[int, int]]:
    """``num_heads`` heads of the reader drawn without replacement by a generator seeded with ``seed``, in
    (layer, head) order: §5.3's alternative head set ("random heads cause smaller drops", §3)."""
    all_heads = reader.all_heads()
    if num_heads > len(all_heads):
        raise ValueError(f"num_heads={num_heads} exceeds the {len(all_heads)} heads of reader {reader.name}")
    picked = np.random.default_rng(seed).choice(len(all_heads), num_heads, replace=False)
    return [all_heads[int(h)] for h in sorted(picked)]
