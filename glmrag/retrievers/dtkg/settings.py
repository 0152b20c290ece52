"""Every tunable of DTKG (Dual-Track KG-verified reasoning) in one typed, validated dataclass.

:class:`DTKGSettings` is what :class:`~glmrag.retrievers.dtkg.retriever.DTKGRetriever` takes as ``settings``
and what ``configs/retriever/dtkg*.yaml`` build under ``settings:``. Each field's docstring gives its source:
a paper constant with its tag ("DTKG App. A.4"), or "a stated choice" where the paper names the constant
without a value.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("auto", "parallel", "chain", "random")
"""``auto``: the few-shot classifier routes (DTKG §3.2); the others are DTKG Table 2's fixed-track ablations
(Only-Fact Verification, Only-Reasoning Chain, Random Classification)."""
SCORINGS = ("hybrid", "cosine", "rerank", "random")
"""DTKG Table 3: Two-Stage (Full), S_cos Only, S_rr Only, None (Random)."""
CLASSIFIER_LABELS = ("yes_no", "chained_parallel")
"""The classifier's reply words: ``yes_no``, the paper's (DTKG §3.2: "yes" -> chained, "no" -> parallel), or
``chained_parallel``, the track names (glmrag's earlier prompt; a named deviation, docs/fidelity.md)."""
DENOISES = ("none", "generic", "task_aware")
"""DTKG Table 4: w/o Denoise, Generic Denoise (rules + global threshold, no LLM), Task-Aware (Full, §3.4)."""
RERANK_LISTED = 5
"""Candidates the listwise LLM reranker is asked to list (best first); unlisted ones score 0. A stated choice:
more than the W_max = 3 relations and k = 3 triples the tracks keep, few enough to keep the reply short."""

COUNTS = (
    "candidates",
    "max_depth",
    "max_width",
    "select_trigger",
    "select_max",
    "verify_top",
    "answer_paths",
    "max_facts",
)
FRACTIONS = ("alpha", "threshold", "necessity_threshold", "link_threshold")


@dataclass(frozen=True)
class DTKGSettings:
    """Every constant of one DTKG run; validated on construction (a bad value raises ``ValueError``)."""

    mode: str = "auto"
    """Track routing: one of :data:`MODES` (DTKG §3.2, Table 2)."""
    classifier_labels: str = "yes_no"
    """The classifier's reply words (``mode="auto"``): one of :data:`CLASSIFIER_LABELS`."""
    scoring: str = "hybrid"
    """Candidate scoring: one of :data:`SCORINGS` (DTKG Table 3)."""
    denoise: str = "task_aware"
    """Denoising: one of :data:`DENOISES` (DTKG Table 4)."""
    candidates: int = 50
    """N, the stage-I top N by cosine (DTKG App. A.4: "we set N = 50")."""
    alpha: float = 0.75
    """Weight of the reranker score in Eq. 7 (DTKG App. A.6: "we fix alpha = 0.75")."""
    max_depth: int = 3
    """D_max of the chained track (DTKG §3.3.2 (i); App. A.7: "limits the search depth D <= 3")."""
    max_width: int = 3
    """W_max, relations kept per expansion step (DTKG §3.3.2 (ii); App. A.5: "we select W_max = 3")."""
    threshold: float = 0.5
    """θ of DTKG §3.3.2 (iii): relations with score_combined < θ are dropped; also Table 4's "global
    thresholding" of the generic denoiser. A stated choice (the paper gives no value): at 0.5 θ bites under
    every scoring mode. With alpha 0.75 a candidate needs a listwise rank score of at least
    (0.5 - 0.25 cos) / 0.75, i.e. the top two or three of the five listed (rank scores 1, .8, .6, .4, .2), and
    no unlisted one passes; cosine-only scoring keeps cosines >= 0.5; random scoring keeps half. The earlier
    0.2 never removed any of the top three reranked candidates, so Table 4's generic and none modes gave the
    same triples (an audit of this code on the MuSiQue KG)."""
    select_trigger: int = 6
    """The pool is "excessive" (DTKG §3.3.2 (iv)) when an expansion step has more than this many candidate
    relations *before scoring*, so the LLM selection runs independently of the scoring mode (Table 3). A
    stated choice: 2 W_max, more than the width rule could keep twice over."""
    select_max: int = 3
    """Relations the LLM may select: "at most three high-confidence relations" (DTKG §3.3.2 (iv))."""
    necessity_threshold: float = 0.5
    """θ of DTKG Eq. 16 on the necessity score scaled to [0, 1] (the LLM answers 0-10); a stated choice."""
    verify_top: int = 3
    """Top-k triples t* a fact is verified against (DTKG §3.3.1, Eq. 8); k is not given, a stated choice
    (= W_max)."""
    answer_paths: int = 3
    """Top-k paths P* the chained answer is generated from (DTKG Eq. 14); k is not given, a stated choice
    (= W_max)."""
    max_facts: int = 5
    """Atomic facts kept from a decomposition (DTKG App. A.7: "n is typically small (<= 5)")."""
    keywords: tuple[str, ...] = ("id", "source", "version", "metadata")
    """K_invalid of DTKG Eq. 15 (§3.4), matched as whole words of a relation label, case-insensitively. The
    paper's relations are Wikidata properties, where "wikidata: id" is real; an OpenIE KG built from passages
    has almost no such relations (an audit counted 7 of the MuSiQue KG's 17,234 triples, all false
    positives), so here the generic and task-aware modes differ from none mainly through θ and Eq. 16."""
    link_threshold: float = 0.5
    """Least string similarity of a DTKG Eq. 5 link (:data:`glmrag.retrievers.dtkg.linking.MIN_SIMILARITY`,
    with the reason for the value); below it a mention is unlinked and counted. Not given in the paper."""

    def __post_init__(self) -> None:
        where = "(see configs/retriever/dtkg.yaml, retriever.<name>.settings)"
        for key, allowed in (
            ("mode", MODES),
            ("classifier_labels", CLASSIFIER_LABELS),
            ("scoring", SCORINGS),
            ("denoise", DENOISES),
        ):
            if getattr(self, key) not in allowed:
                raise ValueError(
                    f"DTKG settings.{key}={getattr(self, key)!r} is unknown; expected one of {', '.join(allowed)}"
                )
        bad = {k: getattr(self, k) for k in COUNTS if not _is_count(getattr(self, k))}
        if bad:
            raise ValueError(f"DTKG settings {bad} must be integers >= 1 {where}")
        for key in FRACTIONS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise ValueError(f"DTKG settings.{key}={value!r} must be a number in [0, 1] {where}")
        if isinstance(self.keywords, str) or not all(isinstance(k, str) for k in self.keywords):
            raise ValueError(f"DTKG settings.keywords={self.keywords!r} must be a list of words {where}")
        # a YAML list arrives as a ListConfig: store a tuple of lower-case words (hashable, frozen)
        object.__setattr__(self, "keywords", tuple(k.lower() for k in self.keywords))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
