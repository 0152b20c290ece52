"""Importers: each reads one benchmark file format and returns a :class:`Dataset`.

HippoRAG (:func:`load_hipporag`), official MuSiQue, HotpotQA, 2WikiMultihopQA, LinearRAG/SeRAG and
GFM-RAG ``raw/`` folders; each format module (:mod:`glmrag.data.formats`) documents its schema and gold.
All promise: passage ids from :meth:`Passage.make` (title, text); ``answers`` = the gold answer, then its
aliases, deduplicated; unique question ids; non-ASCII text kept as read. Recoverable problems are counted
in ``dataset.report`` with examples; anything else raises :class:`DataFormatError` naming the file, the
record and what was expected.
"""

from glmrag.data.formats.common import DataFileNotFoundError, read_json, read_jsonl
from glmrag.data.formats.contexts import join_sentences, load_2wiki, load_hotpotqa
from glmrag.data.formats.gfmrag import load_gfmrag
from glmrag.data.formats.hipporag import load_hipporag
from glmrag.data.formats.linearrag import load_linearrag, normalise_title
from glmrag.data.formats.paragraphs import load_musique

__all__ = [
    "DataFileNotFoundError",
    "join_sentences",
    "load_2wiki",
    "load_gfmrag",
    "load_hipporag",
    "load_hotpotqa",
    "load_linearrag",
    "load_musique",
    "normalise_title",
    "read_json",
    "read_jsonl",
]
