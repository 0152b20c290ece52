"""What the two DTKG tracks share (§3.3): their parts and the :meth:`Track.run` contract.

Both tracks use the LLM, the settings, the two-stage scorer (Eqs. 6-7), the denoiser (§3.4) and the entity
linker (Eq. 5), built once per index; the retriever routes each question to one track (§3.2).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from glmrag.data.types import Question
from glmrag.index.kg import KGIndex
from glmrag.llm.base import LLM
from glmrag.retrievers.dtkg.denoise import Denoiser
from glmrag.retrievers.dtkg.evidence import TrackResult
from glmrag.retrievers.dtkg.linking import EntityLinker, Link
from glmrag.retrievers.dtkg.scoring import TwoStageScorer
from glmrag.retrievers.dtkg.settings import DTKGSettings


def link_trace(index: KGIndex, mention: str, best: Link | None, linked: bool) -> dict:
    """A trace entry of one Eq. 5 link: the mention, its best entity and similarity, and whether it linked."""
    return {
        "mention": mention,
        "entity": index.entities[best.entity] if best is not None else None,
        "similarity": round(best.similarity, 4) if best is not None else None,
        "linked": linked,
    }


def first_line(text: str) -> str:
    """The first non-blank line of an LLM answer, stripped ("" for none)."""
    return text.strip().split("\n", 1)[0].strip() if text else ""


class Track(ABC):
    """A DTKG track: answers one question from the KG and records the triples it used."""

    def __init__(
        self,
        llm: LLM,
        settings: DTKGSettings,
        scorer: TwoStageScorer,
        denoiser: Denoiser,
        linker: Callable[[KGIndex], EntityLinker],
    ) -> None:
        self.llm, self.settings, self.scorer, self.denoiser, self.linker = llm, settings, scorer, denoiser, linker

    @abstractmethod
    def run(self, question: Question, index: KGIndex, rng: np.random.Generator) -> TrackResult:
        """The track's answer to ``question`` and the triples it was built from (``rng``: seeded per question)."""
