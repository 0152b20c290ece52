"""Import a HippoRAG-format OpenIE file (entities and triples extracted by an LLM).

The file is ``{"docs": [{"title", "text" | "passage", "extracted_entities": [...],
"extracted_triples": [[h, r, t], ...]}, ...]}`` as written by HippoRAG (and read
by GFM-RAG's KG constructor); a ``.xz`` copy is read through :mod:`lzma`.
Docs are matched to passages by ``Passage.make(title, text).id``.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from functools import cached_property
from pathlib import Path

from glmrag.data.types import Corpus, DataFormatError, passage_id
from glmrag.index.extractors.base import Extractor, PassageExtraction

_DOCS_EXPECTED = '{"docs": [{"title", "text", "extracted_entities": [...], "extracted_triples": [[h, r, t], ...]}]}'


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed when its name ends in ``.xz``."""
    data = path.read_bytes()
    return lzma.decompress(data) if path.suffix == ".xz" else data


class OpenIEImportExtractor(Extractor):
    """Entities and triples read from an OpenIE file instead of extracted.

    Report keys: ``docs`` (in the file), ``docs_not_in_corpus``, ``docs_duplicate``
    (same title and text again; the first is used), ``triples`` (kept),
    ``triples_bad_length`` (not three parts), ``triples_empty_part`` (a part that
    is not a string or is blank) and ``entities_empty``. Passages of the corpus
    with no doc in the file raise :class:`~glmrag.data.types.DataFormatError`.
    """

    name = "openie_import"

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)

    @cached_property
    def _raw(self) -> bytes:
        if not self.path.is_file():
            raise FileNotFoundError(f"OpenIE file {self.path} does not exist; expected a HippoRAG openie_*.json")
        return _read_bytes(self.path)

    def settings(self) -> dict:
        """The file name and the sha256 of its (decompressed) content, so a changed file means a rebuild."""
        return {"file": self.path.name, "sha256": hashlib.sha256(self._raw).hexdigest()[:16]}

    def _docs(self) -> list[dict]:
        try:
            data = json.loads(self._raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise DataFormatError(str(self.path), "file", f"not valid JSON ({err})", _DOCS_EXPECTED) from err
        if not isinstance(data, dict) or not isinstance(data.get("docs"), list):
            raise DataFormatError(str(self.path), "top level", "no list under 'docs'", _DOCS_EXPECTED)
        return data["docs"]

    def _doc_text(self, doc: dict, i: int) -> tuple[str, str]:
        """(title, text) of doc ``i``; ``passage`` is ``title + "\\n" + text`` in HippoRAG files."""
        title = doc.get("title")
        text = doc.get("text")
        if text is None and isinstance(doc.get("passage"), str):
            passage = doc["passage"]
            prefix = f"{title}\n"
            text = passage[len(prefix) :] if isinstance(title, str) and passage.startswith(prefix) else passage
        if not isinstance(title, str) or not isinstance(text, str):
            raise DataFormatError(
                str(self.path), f"docs[{i}]", "no string 'title' and 'text' (or 'passage')", _DOCS_EXPECTED
            )
        return title, text

    def _parse(self, doc: dict, pid: str) -> PassageExtraction:
        entities = []
        for ent in doc.get("extracted_entities") or []:
            if isinstance(ent, str) and ent.strip():
                entities.append(ent)
            else:
                self.count("entities_empty")
        triples = []
        for triple in doc.get("extracted_triples") or []:
            if not isinstance(triple, (list, tuple)) or len(triple) != 3:
                self.count("triples_bad_length")
            elif not all(isinstance(part, str) and part.strip() for part in triple):
                self.count("triples_empty_part")
            else:
                triples.append((triple[0], triple[1], triple[2]))
        self.count("triples", len(triples))
        return PassageExtraction(pid, entities, triples)

    def extract(self, corpus: Corpus) -> list[PassageExtraction]:
        """Extractions of the corpus passages, read from the file (see the class docstring for the report)."""
        self.report = {"docs": 0, "docs_not_in_corpus": 0, "docs_duplicate": 0, "triples": 0}
        self.report |= {"triples_bad_length": 0, "triples_empty_part": 0, "entities_empty": 0}
        by_id: dict[str, PassageExtraction] = {}
        for i, doc in enumerate(self._docs()):
            self.count("docs")
            if not isinstance(doc, dict):
                raise DataFormatError(str(self.path), f"docs[{i}]", "not an object", _DOCS_EXPECTED)
            pid = passage_id(*self._doc_text(doc, i))
            if pid not in corpus:
                self.count("docs_not_in_corpus")
            elif pid in by_id:
                self.count("docs_duplicate")
            else:
                by_id[pid] = self._parse(doc, pid)
        missing = [p for p in corpus if p.id not in by_id]
        if missing:
            shown = "; ".join(repr(p.title) for p in missing[:3])
            raise DataFormatError(
                str(self.path),
                f"passage {shown}" + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""),
                f"{len(missing)} of {len(corpus)} corpus passages have no doc with the same title and text",
                "an OpenIE file made from this corpus (or extract with SpacyExtractor)",
            )
        return [by_id[p.id] for p in corpus]
