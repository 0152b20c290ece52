"""Extractors: corpus -> per-passage entities and triples (raw phrases)."""

from glmrag.index.extractors.base import Extractor, PassageExtraction, Triple
from glmrag.index.extractors.llm_openie import LLMOpenIEExtractor
from glmrag.index.extractors.openie_import import OpenIEImportExtractor
from glmrag.index.extractors.spacy_extractor import SpacyExtractor, load_nlp, mention_spans

__all__ = [
    "Extractor",
    "LLMOpenIEExtractor",
    "OpenIEImportExtractor",
    "PassageExtraction",
    "SpacyExtractor",
    "Triple",
    "load_nlp",
    "mention_spans",
]
