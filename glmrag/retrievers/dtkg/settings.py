"""The constants of DTKG (Dual-Track KG-verified reasoning), each with the place in the paper it comes from.

The DTKG paper gives ``N`` = 50 (App. A.4), ``alpha`` = 0.75 (Eq. 7, App. A.6), ``D_max`` = 3 (§3.3.2 (i))
and ``W_max`` = 3 (§3.3.2 (ii), App. A.5), the keyword library of Eq. 15 and
"at most three" relations chosen by the LLM (§3.3.2 (iv)). It names the
thresholds θ of §3.3.2 (iii) and Eq. 16, the top-k triples of the verification
(§3.3.1) and the top-k paths of Eq. 14 without giving their values; those
defaults are stated choices, marked as such below, and every one is a
constructor argument of :class:`~glmrag.retrievers.dtkg.retriever.DTKGRetriever`
and a key of ``configs/retriever/dtkg.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("auto", "parallel", "chain", "random")
"""``auto``: the few-shot classifier routes (§3.2); the others are DTKG Table 2's fixed-track ablations
(Only-Fact Verification, Only-Reasoning Chain, Random Classification)."""
SCORINGS = ("hybrid", "cosine", "rerank", "random")
"""DTKG Table 3: Two-Stage (Full), S_cos Only, S_rr Only, None (Random)."""
CLASSIFIER_LABELS = ("yes_no", "chained_parallel")
"""The classifier's reply words: ``yes_no``, the paper's (§3.2: "yes" -> chained, "no" -> parallel), or
``chained_parallel``, the track names (glmrag's earlier prompt; a named deviation, docs/fidelity.md)."""
DENOISES = ("none", "generic", "task_aware")
"""DTKG Table 4: w/o Denoise, Generic Denoise (rules + global threshold, no LLM), Task-Aware (Full, §3.4)."""

CANDIDATES = 50
"""Stage I keeps the top N candidates by cosine (App. A.4: "we set N = 50")."""
ALPHA = 0.75
"""Weight of the reranker score in Eq. 7 (App. A.6: "we fix alpha = 0.75")."""
MAX_DEPTH = 3
"""D_max of the chained track (§3.3.2 (i); App. A.7: "limits the search depth D <= 3")."""
MAX_WIDTH = 3
"""W_max, relations kept per expansion step (§3.3.2 (ii); App. A.5: "we select W_max = 3")."""
SELECT_MAX = 3
"""The LLM selects "at most three high-confidence relations" (§3.3.2 (iv))."""
THRESHOLD = 0.5
"""θ of §3.3.2 (iii) (drop relations with score_combined < θ); also Table 4's "global thresholding" of the
generic denoiser. A stated choice: the paper gives no value. 0.5 is half the largest combined score, and it is
the value at which θ bites under every scoring mode: with alpha 0.75 (Eq. 7) a candidate needs a listwise rank
score of at least (0.5 - 0.25 cos) / 0.75, i.e. the top two or three of the five listed (rank scores
1, .8, .6, .4, .2), and no unlisted one passes; cosine-only scoring keeps cosines of at least 0.5; random
scoring keeps half. The earlier 0.2 never removed any of the top three reranked candidates, so Table 4's
generic and none modes gave the same triples (an audit of this code on the MuSiQue KG)."""
SELECT_TRIGGER = 6
"""The pool is "excessive" (§3.3.2 (iv)) when an expansion step has more than this many candidate relations
*before scoring* (so the LLM selection runs or not independently of the scoring mode, Table 3); a stated
choice: 2 W_max, more than the width rule could keep twice over."""
NECESSITY_THRESHOLD = 0.5
"""θ of Eq. 16 on the necessity score scaled to [0, 1] (the LLM answers 0-10); a stated choice."""
VERIFY_TOP = 3
"""Top-k triples t* a fact is verified against (§3.3.1, Eq. 8); k is not given, a stated choice (= W_max)."""
ANSWER_PATHS = 3
"""Top-k paths P* the answer is generated from (Eq. 14); k is not given, a stated choice (= W_max)."""
MAX_FACTS = 5
"""Atomic facts kept from a decomposition (App. A.7: "n is typically small (<= 5)")."""
RERANK_LISTED = 5
"""Candidates the listwise LLM reranker is asked to list (best first); unlisted ones score 0. A stated choice:
more than the W_max = 3 relations and k = 3 triples the tracks keep, few enough to keep the reply short."""
INVALID_KEYWORDS = ("id", "source", "version", "metadata")
"""K_invalid of Eq. 15 (§3.4), matched as whole words of a relation label, case-insensitively. The paper's
relations are Wikidata properties, where "wikidata: id" is real; an OpenIE KG built from passages has almost no
such relations (an audit counted 7 of the MuSiQue KG's 17,234 triples, all false positives), so here the
generic and task-aware modes differ from none mainly through θ and Eq. 16."""
LINK_THRESHOLD = 0.5
"""Least string similarity of an Eq. 5 link (:data:`glmrag.retrievers.dtkg.linking.MIN_SIMILARITY`, with the
reason for the value); below it a mention is unlinked and counted."""


@dataclass(frozen=True)
class DTKGSettings:
    """Every constant of one DTKG run; validated on construction."""

    mode: str = "auto"
    """Track routing: one of :data:`MODES`."""
    classifier_labels: str = "yes_no"
    """The classifier's reply words (``mode="auto"``): one of :data:`CLASSIFIER_LABELS`."""
    scoring: str = "hybrid"
    """Candidate scoring: one of :data:`SCORINGS`."""
    denoise: str = "task_aware"
    """Denoising: one of :data:`DENOISES`."""
    candidates: int = CANDIDATES
    """N of stage I (App. A.4)."""
    alpha: float = ALPHA
    """Reranker weight of Eq. 7 (App. A.6)."""
    max_depth: int = MAX_DEPTH
    """D_max (§3.3.2)."""
    max_width: int = MAX_WIDTH
    """W_max (§3.3.2, App. A.5)."""
    threshold: float = THRESHOLD
    """θ on combined scores (§3.3.2 (iii)); the generic denoiser's global threshold (Table 4)."""
    select_trigger: int = SELECT_TRIGGER
    """LLM relation selection runs when more candidates than this pass θ (§3.3.2 (iv))."""
    select_max: int = SELECT_MAX
    """Relations the LLM may select (§3.3.2 (iv))."""
    necessity_threshold: float = NECESSITY_THRESHOLD
    """θ of Eq. 16."""
    verify_top: int = VERIFY_TOP
    """Triples each fact is verified against (§3.3.1)."""
    answer_paths: int = ANSWER_PATHS
    """Paths the chained answer reads (Eq. 14)."""
    max_facts: int = MAX_FACTS
    """Atomic facts kept per decomposition (App. A.7)."""
    keywords: tuple[str, ...] = INVALID_KEYWORDS
    """K_invalid (Eq. 15)."""
    link_threshold: float = LINK_THRESHOLD
    """Least similarity of an Eq. 5 link."""

    def __post_init__(self) -> None:
        for key, value, allowed in (
            ("mode", self.mode, MODES),
            ("classifier_labels", self.classifier_labels, CLASSIFIER_LABELS),
            ("scoring", self.scoring, SCORINGS),
            ("denoise", self.denoise, DENOISES),
        ):
            if value not in allowed:
                raise ValueError(f"DTKG {key}={value!r} is unknown; expected one of {', '.join(allowed)}")
        counts = {
            "candidates": self.candidates,
            "max_depth": self.max_depth,
            "max_width": self.max_width,
            "select_trigger": self.select_trigger,
            "select_max": self.select_max,
            "verify_top": self.verify_top,
            "answer_paths": self.answer_paths,
            "max_facts": self.max_facts,
        }
        bad = {k: v for k, v in counts.items() if not isinstance(v, int) or v < 1}
        if bad:
            raise ValueError(f"DTKG settings {bad} must be integers >= 1 (see configs/retriever/dtkg.yaml)")
        for key, value in (
            ("alpha", self.alpha),
            ("threshold", self.threshold),
            ("necessity_threshold", self.necessity_threshold),
            ("link_threshold", self.link_threshold),
        ):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"DTKG {key}={value} must be in [0, 1]")
        object.__setattr__(self, "keywords", tuple(k.lower() for k in self.keywords))
