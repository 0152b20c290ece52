"""DTKG (Dual-Track KG-verified reasoning): classifier, two tracks, two-stage scoring, denoising.

One concept per module: :mod:`.settings` (every tunable, :class:`DTKGSettings`), :mod:`.prompts`,
:mod:`.classifier` (§3.2), :mod:`.linking` (Eq. 5), :mod:`.rerank` and :mod:`.scoring` (Eqs. 6-7),
:mod:`.denoise` (§3.4), :mod:`.track` (what both tracks share), :mod:`.parallel` (§3.3.1), :mod:`.chain`
(§3.3.2), :mod:`.ranking` (passages for Recall@k) and :mod:`.retriever` (the :class:`DTKGRetriever`).
"""

from glmrag.retrievers.dtkg.rerank import CrossEncoderReranker, LLMReranker, Reranker
from glmrag.retrievers.dtkg.retriever import DTKGRetriever
from glmrag.retrievers.dtkg.settings import DTKGSettings

__all__ = ["CrossEncoderReranker", "DTKGRetriever", "DTKGSettings", "LLMReranker", "Reranker"]
