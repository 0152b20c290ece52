"""Extractors: corpus -> per-passage entities and triples (raw phrases).

The extractors themselves are imported on first use, so that importing ``glmrag.index.extractors.base`` (the
``Extractor`` type) does not load spaCy, which a GPU machine without it cannot import.
"""

from importlib import import_module

from glmrag.index.extractors.base import Extractor, PassageExtraction, Triple

_LAZY = {
    "LLMOpenIEExtractor": "llm_openie",
    "OpenIEImportExtractor": "openie_import",
    "SpacyExtractor": "spacy_extractor",
    "load_nlp": "spacy_extractor",
    "mention_spans": "spacy_extractor",
}
"""Name -> the submodule that defines it, imported when the name is first read."""

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


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
