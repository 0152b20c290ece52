"""Importers: each reads one benchmark file format and returns a :class:`Dataset`.

- :func:`load_hipporag`: HippoRAG questions + a ``[{title, text}]`` corpus; gold =
  ``is_supporting`` paragraphs, matched by (title, text).
- :func:`load_musique`: official MuSiQue, corpus = union of paragraphs; gold =
  ``is_supporting`` paragraphs.
- :func:`load_hotpotqa` / :func:`load_2wiki`: official HotpotQA / 2WikiMultihopQA,
  corpus = union of contexts; gold = ``supporting_facts`` titles.
- :func:`load_linearrag`: LinearRAG/SeRAG questions + a ``[{title, text}]`` corpus;
  approximate gold = ``evidence`` head entities matched to titles.
- :func:`load_gfmrag`: a GFM-RAG ``raw/`` folder; gold = ``supporting_facts`` titles.

All share these promises: passage ids come from :meth:`Passage.make` (title, text);
``answers`` is the gold answer then its aliases, deduplicated; question ids are
unique; recoverable problems are counted in ``dataset.report`` with examples,
never silently; anything else raises :class:`DataFormatError` naming the file,
the record and what was expected. Non-ASCII text is kept exactly as read.
Each format module documents its own conventions.
"""

from glmrag.data.formats.common import DataFileNotFoundError, read_json, read_jsonl
from glmrag.data.formats.contexts import join_sentences, load_2wiki, load_hotpotqa
from glmrag.data.formats.gfmrag import load_gfmrag
from glmrag.data.formats.linearrag import load_linearrag, normalise_title
from glmrag.data.formats.paragraphs import load_hipporag, load_musique

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
