"""OpenIE by a language model: named entities, then triples, per passage (HippoRAG's two prompts).

GLM-RAG §4.1 builds its KG with an LM-based NER and OpenIE, as GFM-RAG and HippoRAG do (the embedded
MuSiQue set ships that pipeline's GPT-3.5 output). :class:`LLMOpenIEExtractor` runs the same two
one-shot stages with any :class:`~glmrag.llm.base.LLM` passed in: NER asks for
``{"named_entities": [...]}``; OpenIE, given the passage and its entities, asks for ``{"triples": ...}``
(HippoRAG's OpenIE instruction). The one-shot example is written for this module, not HippoRAG's.
Answers are parsed leniently (:func:`glmrag.llm.parse.parse_json`); malformed entities and triples are
dropped and counted. Raw answers are cached per passage (:class:`PassageCache`), so a run resumes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from glmrag.data.types import Corpus, Passage
from glmrag.index.extractors.base import Extractor, PassageExtraction, Triple
from glmrag.io import load_cached_json, write_cache_json
from glmrag.llm.base import LLM, Generation, Message, UsageCounter
from glmrag.llm.parse import parse_json
from glmrag.progress import progress

log = logging.getLogger(__name__)

PROMPT_VERSION = "hipporag-oneshot-1"
"""Bump when a prompt or the one-shot example changes: cached answers and indexes are then redone."""
USAGE_TAG = "openie"
"""The ``llm.track`` method name of the extraction calls."""
NER_MAX_NEW_TOKENS = 128
"""Token budget of an NER answer (a stated choice: ~25 entities as JSON)."""
OPENIE_MAX_NEW_TOKENS = 512
"""Token budget of an OpenIE answer (a stated choice: ~30 triples as JSON)."""

EXAMPLE_PASSAGE = Passage.make(
    "Marta Kowalski",
    "Marta Kowalski (born 4 March 1962) is a Polish architect. She designed the Vistula Concert Hall in Krakow, "
    "which opened in 1998. In 2005 she received the Piranesi Prize.",
)
"""The one-shot example of the extraction prompts (and of :mod:`glmrag.retrievers.hyperaddress.llm_descriptions`)."""
EXAMPLE_ENTITIES = ["Marta Kowalski", "4 March 1962", "Polish", "Vistula Concert Hall", "Krakow", "1998", "2005"]
EXAMPLE_ENTITIES += ["Piranesi Prize"]
EXAMPLE_TRIPLES = [
    ["Marta Kowalski", "born on", "4 March 1962"],
    ["Marta Kowalski", "nationality", "Polish"],
    ["Marta Kowalski", "occupation", "architect"],
    ["Marta Kowalski", "designed", "Vistula Concert Hall"],
    ["Vistula Concert Hall", "located in", "Krakow"],
    ["Vistula Concert Hall", "opened in", "1998"],
    ["Marta Kowalski", "received", "Piranesi Prize"],
    ["Marta Kowalski", "received Piranesi Prize in", "2005"],
]

NER_INSTRUCTION = (
    "Your task is to extract named entities from the given paragraph. "
    'Respond with a JSON object {"named_entities": [...]} listing the entities as written in the paragraph.'
)
OPENIE_INSTRUCTION = (
    "Your task is to construct an RDF (Resource Description Framework) graph from the given paragraph and "
    'named entity list. Respond with a JSON object {"triples": [[subject, relation, object], ...]}, each '
    "triple a relationship of the graph.\n\nPay attention to the following requirements:\n"
    "- Each triple should contain at least one, but preferably two, of the named entities in the list.\n"
    "- Clearly resolve pronouns to their specific names to maintain clarity."
)


def passage_block(passage: Passage) -> str:
    """The passage as the prompts show it: title, newline, text (HippoRAG's ``passage`` field)."""
    return f"{passage.title}\n{passage.text}"


def _ner_user(passage: Passage) -> str:
    return f"Paragraph:\n```\n{passage_block(passage)}\n```"


def _openie_user(passage: Passage, entities: Sequence[str]) -> str:
    return f"{_ner_user(passage)}\n\n{json.dumps({'named_entities': list(entities)}, ensure_ascii=False)}"


def ner_prompt(passage: Passage) -> list[Message]:
    """The one-shot NER chat of ``passage``."""
    return [
        {"role": "system", "content": NER_INSTRUCTION},
        {"role": "user", "content": _ner_user(EXAMPLE_PASSAGE)},
        {"role": "assistant", "content": json.dumps({"named_entities": EXAMPLE_ENTITIES})},
        {"role": "user", "content": _ner_user(passage)},
    ]


def openie_prompt(passage: Passage, entities: Sequence[str]) -> list[Message]:
    """The one-shot OpenIE chat of ``passage`` and its named ``entities``."""
    return [
        {"role": "system", "content": OPENIE_INSTRUCTION},
        {"role": "user", "content": _openie_user(EXAMPLE_PASSAGE, EXAMPLE_ENTITIES)},
        {"role": "assistant", "content": json.dumps({"triples": EXAMPLE_TRIPLES})},
        {"role": "user", "content": _openie_user(passage, entities)},
    ]


def generation_record(g: Generation) -> dict:
    """What a cache file keeps of one generation: its text and its cost."""
    return {
        "text": g.text,
        "finish_reason": g.finish_reason,
        "prompt_tokens": g.prompt_tokens,
        "generated_tokens": g.generated_tokens,
        "seconds": round(g.seconds, 4),
    }


class PassageCache:
    """One checksummed JSON file per passage: ``<cache_dir>/<kind>-<key>.json``, key a hash of the model,
    prompt and passage (:func:`glmrag.io.write_cache_json`).

    ``cache_dir`` None keeps the records in memory only (lost with the object). Files are written
    atomically, so an interrupted run leaves whole records only and concurrent runs need no lock; a
    truncated, edited or older (checksum-less) file is treated as missing, with a warning, and redone.

    Passages go through the LLM ``batch_size`` at a time, one ``generate`` call per stage and batch. Each
    passage's two raw answers are one JSON file keyed by the model, :data:`PROMPT_VERSION`, the generation
    limits and the passage's title and text (checksummed, written to a temp file and renamed): an
    interrupted run resumes with the passages not yet done, and a finished run is read back without a call.
    Parsing runs on every read, so a cached run's report equals that of the run that filled the cache.
    """

    def __init__(self, cache_dir: str | Path | None, kind: str, model: str, version: str) -> None:
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.kind, self.model, self.version = kind, model, version
        self._memory: dict[str, dict] = {}

    def key(self, passage: Passage, extra: object = None) -> str:
        """sha256 of (model, prompt version, ``extra`` settings, passage title and text), 24 hex digits."""
        blob = json.dumps([self.model, self.version, extra, passage.title, passage.text], ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def path(self, key: str) -> Path | None:
        return self.cache_dir / f"{self.kind}-{key}.json" if self.cache_dir is not None else None

    def get(self, key: str) -> dict | None:
        """The stored record, or None when there is none (or it is not an intact JSON object)."""
        if key in self._memory:
            return self._memory[key]
        path = self.path(key)
        if path is None:
            return None
        record = load_cached_json(path, f"LLM {self.kind} cache {self.cache_dir}")
        if record is None:
            return None
        if not isinstance(record, dict):
            log.warning("%s: cache record is not a JSON object; it is redone", path)
            return None
        self._memory[key] = record
        return record

    def put(self, key: str, record: dict) -> None:
        self._memory[key] = record
        path = self.path(key)
        if path is not None:
            write_cache_json(path, record)


def parse_counted(text: str, default, expect, report: Extractor, prefix: str):
    """:func:`parse_json` of ``text``; its repairs and fallbacks counted in ``report`` as ``<prefix>_json_*``."""
    counter = UsageCounter()
    value = parse_json(text, default, counter=counter, expect=expect)
    for event, n in counter.total().events.items():
        report.count(f"{prefix}_{event}", n)
    return value


class LLMOpenIEExtractor(Extractor):
    """Entities and triples written by an LLM (see the module docstring).

    Args:
        llm: the language model, passed in (built by Hydra from ``configs/llm/*.yaml``).
        cache_dir: where the per-passage answers are kept (None: in memory only, no resuming).
        batch_size: passages per ``generate`` call of each stage.
        ner_max_new_tokens / openie_max_new_tokens: answer budgets (part of the cache key).

    Report keys: ``passages``, ``passages_cached`` (read from the cache),
    ``passages_generated``, ``entities``, ``entities_bad`` (not a non-blank
    string), ``entities_duplicate`` and ``triples_duplicate`` (repeated; the
    first is kept), ``triples``, ``triples_bad_length`` (not a list of three),
    ``triples_not_string`` (a part that is not a string), ``triples_empty_part``
    (a blank part), ``ner_truncated`` / ``openie_truncated`` (the token budget
    ran out), ``ner_no_list`` / ``openie_no_list`` (the answer held no list of
    entities or triples), and ``ner_json_repaired``, ``ner_json_fallback``,
    ``openie_json_repaired``, ``openie_json_fallback`` from the parser.
    """

    name = "llm_openie"

    def __init__(
        self,
        llm: LLM,
        cache_dir: str | Path | None = None,
        batch_size: int = 8,
        ner_max_new_tokens: int = NER_MAX_NEW_TOKENS,
        openie_max_new_tokens: int = OPENIE_MAX_NEW_TOKENS,
    ) -> None:
        super().__init__()
        if batch_size < 1 or ner_max_new_tokens < 1 or openie_max_new_tokens < 1:
            raise ValueError(
                f"batch_size={batch_size}, ner_max_new_tokens={ner_max_new_tokens} and "
                f"openie_max_new_tokens={openie_max_new_tokens} must all be at least 1"
            )
        self.llm, self.batch_size = llm, batch_size
        self.ner_max_new_tokens, self.openie_max_new_tokens = ner_max_new_tokens, openie_max_new_tokens
        self.cache = PassageCache(cache_dir, "openie", llm.name, PROMPT_VERSION)

    def settings(self) -> dict:
        """The LLM, the prompt version and the answer budgets (not ``batch_size`` or ``cache_dir``)."""
        return {
            "llm": self.llm.name,
            "prompt_version": PROMPT_VERSION,
            "ner_max_new_tokens": self.ner_max_new_tokens,
            "openie_max_new_tokens": self.openie_max_new_tokens,
        }

    def _key(self, passage: Passage) -> str:
        return self.cache.key(passage, [self.ner_max_new_tokens, self.openie_max_new_tokens])

    def extract(self, corpus: Corpus) -> list[PassageExtraction]:
        """Extractions of every passage in corpus order: cached answers read, the others generated and cached."""
        kinds = ("passages", "passages_cached", "passages_generated", "entities", "entities_bad", "triples")
        kinds += ("entities_duplicate", "triples_bad_length", "triples_not_string", "triples_empty_part")
        kinds += ("triples_duplicate", "ner_truncated", "openie_truncated", "ner_no_list", "openie_no_list")
        self.report = dict.fromkeys(kinds, 0)
        records = {p.id: self.cache.get(self._key(p)) for p in corpus}
        todo = [p for p in corpus if records[p.id] is None]
        self.count("passages_cached", len(corpus) - len(todo))
        for start in progress(range(0, len(todo), self.batch_size), "LLM OpenIE", unit="batch"):
            batch = todo[start : start + self.batch_size]
            for p, record in zip(batch, self._generate(batch), strict=True):
                self.cache.put(self._key(p), record)
                records[p.id] = record
            self.count("passages_generated", len(batch))
            log.debug("llm openie: %d of %d passages generated", start + len(batch), len(todo))
        return [self._parse(p, records[p.id]) for p in corpus]

    def _generate(self, batch: list[Passage]) -> list[dict]:
        """Both stages for ``batch``: one NER call, then one OpenIE call given the parsed entities."""
        with self.llm.track(USAGE_TAG):
            ner = self.llm.generate([ner_prompt(p) for p in batch], max_new_tokens=self.ner_max_new_tokens)
            entities = [_entities(parse_json(g.text, {}, expect=(dict, list))) or [] for g in ner]
            prompts = [openie_prompt(p, _phrases(ents)) for p, ents in zip(batch, entities, strict=True)]
            openie = self.llm.generate(prompts, max_new_tokens=self.openie_max_new_tokens)
        return [
            {
                "passage_id": p.id,
                "title": p.title,
                "llm": self.llm.name,
                "prompt_version": PROMPT_VERSION,
                "ner": generation_record(n),
                "openie": generation_record(o),
            }
            for p, n, o in zip(batch, ner, openie, strict=True)
        ]

    def _parse(self, passage: Passage, record: dict) -> PassageExtraction:
        """The passage's entities and triples from its cached answers; every drop and repair counted."""
        self.count("passages")
        answers = {}
        for stage in ("ner", "openie"):
            answer = record.get(stage) if isinstance(record.get(stage), dict) else {}
            self.count(f"{stage}_truncated", int(answer.get("finish_reason") == "length"))
            answers[stage] = parse_counted(answer.get("text"), {}, (dict, list), self, stage)
        raw_entities = _entities(answers["ner"])
        if raw_entities is None:
            self.count("ner_no_list")
        entities: dict[str, None] = {}  # small models repeat themselves: keep the first of each
        for e in raw_entities or []:
            if not _is_phrase(e):
                self.count("entities_bad")
            elif e.strip() in entities:
                self.count("entities_duplicate")
            else:
                entities[e.strip()] = None
        raw_triples = _triples(answers["openie"])
        if raw_triples is None:
            self.count("openie_no_list")
        triples: dict[Triple, None] = {}
        for t in raw_triples or []:
            if not isinstance(t, (list, tuple)) or len(t) != 3:
                self.count("triples_bad_length")
            elif not all(isinstance(part, str) for part in t):
                self.count("triples_not_string")
            elif not all(part.strip() for part in t):
                self.count("triples_empty_part")
            elif (triple := (t[0].strip(), t[1].strip(), t[2].strip())) in triples:
                self.count("triples_duplicate")
            else:
                triples[triple] = None
        self.count("entities", len(entities))
        self.count("triples", len(triples))
        return PassageExtraction(passage.id, list(entities), list(triples))


def _is_phrase(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _phrases(values: list) -> list[str]:
    """The non-blank strings of ``values``, stripped (the entities an OpenIE prompt lists)."""
    return [v.strip() for v in values if _is_phrase(v)]


def _entities(answer: object) -> list | None:
    """The entity list of an NER answer: ``{"named_entities": [...]}`` or a bare list; None when neither."""
    if isinstance(answer, dict):
        answer = answer.get("named_entities")
    return answer if isinstance(answer, list) else None


def _triples(answer: object) -> list | None:
    """The triple list of an OpenIE answer: ``{"triples": [...]}`` or a bare list; None when neither."""
    if isinstance(answer, dict):
        answer = answer.get("triples")
    return answer if isinstance(answer, list) else None
