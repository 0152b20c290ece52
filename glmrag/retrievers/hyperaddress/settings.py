"""Every tunable of HyperAddress (Read the Route §3-4) in two typed, validated dataclasses.

:class:`HyperAddressSettings` holds the walk's constants
(:class:`~glmrag.retrievers.hyperaddress.retriever.HyperAddressRetriever`, ``settings:`` in
``configs/retriever/hyperaddress*.yaml``); :class:`SteeringSettings` those of the reader's rounds
(:class:`~glmrag.retrievers.hyperaddress.steering.Steering`, ``steering.settings:``). The paper selects its
constants on MuSiQue development questions (Read the Route Table 6) but its text does not list them, so
most defaults are stated choices, each with its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from glmrag.graph.pagerank import HIPPORAG_DAMPING

HEAD_SETS = ("selected", "random")
"""Addressing heads: selected on probes (Read the Route §3), or a seeded random set (§5.3's alternative head sets)."""
POINTERS = ("word", "last_token")
"""Where pointer scores are read: at every question token (Read the Route §3 Obs. 2), or at the last one only."""
TARGETS = ("heads", "generated_name")
"""What steers: the heads' pointer scores (Read the Route §4.2), or a name the reader generates (App. A's variant)."""


@dataclass(frozen=True)
class HyperAddressSettings:
    """The walk's constants; validated on construction (a bad value raises ``ValueError``)."""

    damping: float = HIPPORAG_DAMPING
    """Probability of following an edge, in [0, 1); HippoRAG's value, as the PPR baseline (a stated choice:
    Read the Route Table 6's value is not in the text)."""
    restart_top: int = 20
    """Incidences that share the question's restart (the best by description-question cosine; a stated
    choice)."""
    temperature: float = 0.1
    """Softmax temperature over the restart incidences' cosines, > 0 (a stated choice)."""
    passage_share: float = 0.5
    """Fraction of an incidence's restart mass put on its passage, the rest on its entity, in [0, 1]: the walk
    starts from the passage that states the description and from the hyperedge it describes (a stated
    choice)."""
    max_descriptions: int = 1
    """Sentences per incidence label of the offline sentence describer, 1-3 ("one to three descriptions",
    Read the Route §4.1); unused when a describer is given."""
    top_entities: int = 100
    """Entities returned with each ranking, by PageRank mass."""
    tol: float = 1e-6
    """L1 tolerance of the power iteration (:func:`glmrag.graph.pagerank.personalized_pagerank`), > 0."""

    def __post_init__(self) -> None:
        where = "(see configs/retriever/hyperaddress.yaml, retriever.<name>.settings)"
        checks = {
            "damping": _is_number(self.damping) and 0.0 <= self.damping < 1.0,
            "restart_top": _is_count(self.restart_top),
            "temperature": _is_number(self.temperature) and self.temperature > 0,
            "passage_share": _is_number(self.passage_share) and 0.0 <= self.passage_share <= 1.0,
            "max_descriptions": _is_count(self.max_descriptions) and self.max_descriptions <= 3,
            "top_entities": _is_count(self.top_entities),
            "tol": _is_number(self.tol) and self.tol > 0,
        }
        ranges = {
            "damping": "a number in [0, 1)",
            "restart_top": "an integer >= 1",
            "temperature": "a number > 0",
            "passage_share": "a number in [0, 1]",
            "max_descriptions": "an integer in 1..3",
            "top_entities": "an integer >= 1",
            "tol": "a number > 0",
        }
        for key, ok in checks.items():
            if not ok:
                raise ValueError(f"HyperAddress settings.{key}={getattr(self, key)!r} must be {ranges[key]} {where}")


@dataclass(frozen=True)
class SteeringSettings:
    """The reader's rounds (Read the Route §4.2, App. A) and its heads (§3); validated on construction.

    Variants (§5.3, Fig. 4, App. A): ``rounds`` 0 is the walk only, 1 one reader pass, 2 two rounds with one
    rewrite; the ablations are ``head_set="random"``, ``pointer="last_token"``, ``transition_gain=0`` and
    ``target="generated_name"``.
    """

    rounds: int = 2
    """Reader rounds, >= 0 (Read the Route Fig. 4: one pass, or two with a rewrite)."""
    read_top: int = 5
    """Passages the reader reads per round, the walk's best (a stated choice)."""
    num_heads: int = 8
    """Addressing heads: "selects eight heads" (Read the Route §3)."""
    probes: int = 64
    """Unlabeled probes the heads are selected on (§3 uses 600; fewer keep a CPU run short)."""
    probe_passages: int = 4
    """Passages in a probe's context (one names the target)."""
    heads: tuple[tuple[int, int], ...] | None = None
    """Fixed ``(layer, head)`` pairs that skip the selection; ``None`` selects (or draws, ``head_set``)."""
    head_set: str = "selected"
    """One of :data:`HEAD_SETS`."""
    pointer: str = "word"
    """One of :data:`POINTERS`."""
    target: str = "heads"
    """One of :data:`TARGETS`; ``generated_name`` gives the read entity nearest the generated name the whole
    pointer share and makes it the only rewrite candidate."""
    pointer_weight: float = 1.0
    """Restart weight of the pointer scores over the read entities, >= 0 (the question's restart weighs 1;
    a stated choice)."""
    transition_gain: float = 2.0
    """A read incidence's weight becomes ``|e|^-1/2 (1 + gain s_e)``, ``s_e`` the entity's pointer score over
    the best read entity's, >= 0; 0 steers the restart only (§5.3's "no steered transitions"; a stated
    choice)."""
    rewrite: bool | None = None
    """Rewrite a question description between rounds (App. A); ``None`` means ``rounds >= 2``."""
    rewrite_threshold: float = 0.7
    """Span-label cosine needed to rewrite (Read the Route App. A: "at least 0.7")."""
    rewrite_weight: float = 2.0
    """Restart weight of a rewritten question, added to the earlier versions' (Read the Route App. A)."""
    max_span: int = 4
    """Words in a rewritable question span (a stated choice)."""
    rewrite_candidates: int = 3
    """Read entities of highest pointer score, not named in the question, considered for a rewrite (a stated
    choice)."""

    def __post_init__(self) -> None:
        where = "(see configs/retriever/hyperaddress_2rounds.yaml, retriever.<name>.steering.settings)"
        for key, allowed in (("head_set", HEAD_SETS), ("pointer", POINTERS), ("target", TARGETS)):
            if getattr(self, key) not in allowed:
                raise ValueError(
                    f"Steering settings.{key}={getattr(self, key)!r} is unknown; expected one of {', '.join(allowed)}"
                )
        counts = ("read_top", "num_heads", "probes", "probe_passages", "max_span", "rewrite_candidates")
        bad = {k: getattr(self, k) for k in counts if not _is_count(getattr(self, k))}
        if not (_is_count(self.rounds) or self.rounds == 0):
            bad["rounds"] = self.rounds
        for key in ("pointer_weight", "transition_gain", "rewrite_weight"):
            if not _is_number(getattr(self, key)) or getattr(self, key) < 0:
                bad[key] = getattr(self, key)
        if not _is_number(self.rewrite_threshold) or not -1.0 <= self.rewrite_threshold <= 1.0:
            bad["rewrite_threshold"] = self.rewrite_threshold
        if bad:
            raise ValueError(
                f"Steering settings {bad} are out of range: counts >= 1 (rounds >= 0), weights and gain >= 0, "
                f"rewrite_threshold a cosine in [-1, 1] {where}"
            )
        if self.rewrite and self.rounds < 2:
            raise ValueError(
                f"Steering settings.rewrite=True with rounds={self.rounds}: a rewrite happens between rounds "
                f"(App. A), so it needs rounds >= 2; set rewrite: false (or leave it null) for one round {where}"
            )
        object.__setattr__(self, "rewrite", self.rounds >= 2 if self.rewrite is None else bool(self.rewrite))
        if self.heads is not None:  # a YAML list of [layer, head] pairs arrives as nested ListConfigs
            object.__setattr__(self, "heads", _pairs(self.heads, where))


def _pairs(heads: Sequence, where: str) -> tuple[tuple[int, int], ...]:
    pairs = tuple(tuple(h) for h in heads)
    if not all(len(h) == 2 and all(_is_int(x) and x >= 0 for x in h) for h in pairs):
        raise ValueError(f"Steering settings.heads={heads!r} must be [[layer, head], ...] of integers >= 0 {where}")
    return tuple((int(a), int(b)) for a, b in pairs)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
