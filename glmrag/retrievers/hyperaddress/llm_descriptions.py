"""Entity descriptions written by an LLM: the labels of HyperAddress incidences (Read the Route §4.1).

"An LLM writes one to three descriptions per mentioned entity" (§4.1), each saying what this passage says
about it, so a question that describes an entity without naming it can match the incidence whose label
states that description. :class:`LLMDescriber` asks, per passage, for a JSON object mapping each entity to
at most ``max_descriptions`` descriptions (a one-shot chat, parsed with repair); an entity left without one
gets the offline sentence label and counts ``description_fallback``. Passages are described in batches when
the hypergraph is built (:meth:`LLMDescriber.prefetch`) and each answer is cached per passage, keyed by the
model, :data:`PROMPT_VERSION`, the entities and the settings.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from glmrag.data.types import Passage
from glmrag.graph.hypergraph import SentenceDescriber
from glmrag.index.extractors.llm_openie import EXAMPLE_PASSAGE, PassageCache, generation_record, passage_block
from glmrag.index.normalize import normalize_phrase
from glmrag.llm.base import LLM, Message
from glmrag.llm.parse import parse_json

log = logging.getLogger(__name__)

USAGE_TAG = "hyperaddress_descriptions"
"""The ``llm.track`` method name of the description calls (index work: question id None)."""
PROMPT_VERSION = "descriptions-oneshot-1"
"""Bump when the prompt or its example changes: cached descriptions are then rewritten."""
MAX_DESCRIPTIONS = 3
"""At most three descriptions per incidence (§4.1: "one to three descriptions per mentioned entity")."""
MAX_NEW_TOKENS = 384
"""Token budget of one passage's answer (a stated choice: ~10 entities with three descriptions each)."""

EXAMPLE_DESCRIPTIONS = {
    "marta kowalski": [
        "Polish architect born on 4 March 1962",
        "designer of the Vistula Concert Hall",
        "winner of the Piranesi Prize in 2005",
    ],
    "vistula concert hall": ["concert hall in Krakow designed by Marta Kowalski", "concert hall opened in 1998"],
    "krakow": ["city of the Vistula Concert Hall"],
    "piranesi prize": ["prize Marta Kowalski received in 2005"],
}

INSTRUCTION = (
    "Your task is to describe entities as a given paragraph describes them. For each entity of the list, write "
    "one to {k} short descriptions (a few words each) of what the paragraph says about that entity, without "
    "repeating its name. Respond with a JSON object mapping each entity, as written in the list, to a list of "
    "descriptions."
)


def _user(passage: Passage, entities: Sequence[str]) -> str:
    listed = json.dumps(list(entities), ensure_ascii=False)
    return f"Paragraph:\n```\n{passage_block(passage)}\n```\n\nEntities: {listed}"


def description_prompt(passage: Passage, entities: Sequence[str], max_descriptions: int = 3) -> list[Message]:
    """The one-shot chat asking for 1 to ``max_descriptions`` descriptions of each of ``entities`` in ``passage``."""
    example = {e: d[:max_descriptions] for e, d in EXAMPLE_DESCRIPTIONS.items()}
    return [
        {"role": "system", "content": INSTRUCTION.format(k=max_descriptions)},
        {"role": "user", "content": _user(EXAMPLE_PASSAGE, list(example))},
        {"role": "assistant", "content": json.dumps(example)},
        {"role": "user", "content": _user(passage, entities)},
    ]


def _descriptions(value: object, limit: int) -> tuple[str, ...]:
    """Usable descriptions of one answer value (a string or a list): non-blank strings, distinct, at most ``limit``."""
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    texts = [t.strip() for t in items if isinstance(t, str) and t.strip()]
    return tuple(dict.fromkeys(texts))[:limit]


class LLMDescriber:
    """Descriptions of a passage's entities written by ``llm`` (see the module docstring).

    Args:
        llm: the language model, passed in (built by Hydra from ``configs/llm/*.yaml``).
        max_descriptions: 1 to 3 descriptions per entity (§4.1).
        cache_dir: one JSON answer per passage (None: kept in memory only).
        batch_size: passages per ``generate`` call of :meth:`prefetch`.
        max_new_tokens: the answer budget of one passage (part of the cache key).
        fallback: labels an entity the answer leaves undescribed (default: its first mentioning sentence).
    """

    name = "llm"

    def __init__(
        self,
        llm: LLM,
        max_descriptions: int = MAX_DESCRIPTIONS,
        cache_dir: str | Path | None = None,
        batch_size: int = 8,
        max_new_tokens: int = MAX_NEW_TOKENS,
        fallback: SentenceDescriber | None = None,
    ) -> None:
        if not 1 <= max_descriptions <= MAX_DESCRIPTIONS:
            raise ValueError(f"max_descriptions={max_descriptions}; HyperAddress §4.1 writes one to three")
        if batch_size < 1 or max_new_tokens < 1:
            raise ValueError(f"batch_size={batch_size} and max_new_tokens={max_new_tokens} must be at least 1")
        self.llm, self.max_descriptions, self.batch_size = llm, max_descriptions, batch_size
        self.max_new_tokens = max_new_tokens
        self.fallback = fallback or SentenceDescriber(max_descriptions=1)
        self.cache = PassageCache(cache_dir, "descriptions", llm.name, PROMPT_VERSION)

    def _key(self, passage: Passage, entities: Sequence[str]) -> str:
        return self.cache.key(passage, [list(entities), self.max_descriptions, self.max_new_tokens])

    def prefetch(self, passages: Sequence[Passage], mentions: Sequence[Sequence[str]]) -> int:
        """Write (and cache) the answers of the passages not described yet, ``batch_size`` per call.

        Returns how many passages were sent to the LLM. Passages without entities are skipped
        (the hypergraph asks nothing for them).
        """
        todo = []
        for passage, names in zip(passages, mentions, strict=True):
            names = list(dict.fromkeys(names))
            if names and self.cache.get(self._key(passage, names)) is None:
                todo.append((passage, names))
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start : start + self.batch_size]
            prompts = [description_prompt(p, names, self.max_descriptions) for p, names in batch]
            with self.llm.track(USAGE_TAG):
                answers = self.llm.generate(prompts, max_new_tokens=self.max_new_tokens)
            for (passage, names), g in zip(batch, answers, strict=True):
                record = {"passage_id": passage.id, "entities": names, "llm": self.llm.name}
                record |= {"prompt_version": PROMPT_VERSION, "answer": generation_record(g)}
                self.cache.put(self._key(passage, names), record)
            log.info("llm descriptions: %d of %d passages written", start + len(batch), len(todo))
        return len(todo)

    def describe(self, passage: Passage, entities: Sequence[str]) -> list[tuple[str, ...]]:
        """One to ``max_descriptions`` descriptions of each of ``entities`` as ``passage`` describes them.

        Generates the answer unless :meth:`prefetch` (or an earlier run, through the cache) wrote it.
        """
        entities = list(entities)
        if not entities:
            return []
        distinct = list(dict.fromkeys(entities))  # the names the prompt lists (and the cache key)
        self.prefetch([passage], [distinct])
        record = self.cache.get(self._key(passage, distinct))
        answer = record.get("answer") if isinstance(record, dict) and isinstance(record.get("answer"), dict) else {}
        with self.llm.track(USAGE_TAG):
            parsed = parse_json(answer.get("text"), {}, counter=self.llm.usage, expect=dict)
            by_name: dict[str, tuple[str, ...]] = {}
            for key, value in parsed.items():
                if isinstance(key, str) and not by_name.get(name := normalize_phrase(key)):
                    by_name[name] = _descriptions(value, self.max_descriptions)
            labels = []
            for entity in entities:
                label = by_name.get(normalize_phrase(entity)) or ()
                if not label:
                    self.llm.usage.count("description_fallback")
                    label = tuple(self.fallback.describe(passage, [entity])[0])
                labels.append(label)
        return labels
