"""HippoRAG 2's recognition memory: an LLM keeps the linked facts that bear on the question.

HippoRAG 2 (Gutiérrez et al., 2025, arXiv 2502.14802, §3.2 "recognition memory") filters the facts that
query-to-triple retrieval linked before they seed the graph search. What this module takes from the released
code, OSU-NLP-Group/HippoRAG ``main`` at c617143, as facts (the prompt's wording and examples here are
glmrag's own):

- the candidates are the ``linking_top_k`` (5) facts of highest min-max normalised similarity, best first
  (``HippoRAG.rerank_facts``), shown to the LLM as JSON ``{"fact": [[subject, predicate, object], ...]}``
  (``DSPyFilter.rerank``: ``json.dumps`` of the candidate lists);
- the instruction (``prompts/filter_default_prompt.py`` and the DSPy file ``main.py`` uses,
  ``filter_llama3.3-70B-Instruct.json``): keep up to 4 facts of the candidate list that bear on the question,
  which may need multi-hop reasoning; copy them, never write new ones; answer in the same JSON form, and
  ``{"fact": []}`` when none is relevant; a system message followed by worked examples as chat turns (theirs
  has 10 examples found by DSPy for Llama-3.3-70B; here :data:`EXAMPLES`, 3 written for glmrag);
- greedy decoding (``temperature`` 0.0 in ``CacheOpenAI``) of at most 512 tokens (``llm_call``:
  ``max_completion_tokens`` 512);
- the reply is read as an object whose ``fact`` is a list of lists of strings (``parse_filter``: pydantic's
  ``Fact``); any other reply is read as no fact at all;
- each fact of the reply is mapped to the candidate whose Python text is closest by difflib's ratio
  (``difflib.get_close_matches(str(fact), [str(candidate), ...], n=1, cutoff=0.0)``), so every listed fact
  keeps some candidate; the kept facts are in reply order, a repeat kept, cut to ``linking_top_k``;
- no kept fact: ``retrieve`` ranks the question's passages by dense retrieval instead of the graph search.

glmrag reads the reply with :func:`glmrag.llm.parse.parse_json` (code fences, trailing commas, Python literals
repaired) where HippoRAG 2 reads its DSPy ``[[ ## fact_after_filter ## ]]`` section; the reply asked for here
is the bare JSON object.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from glmrag.llm.base import LLM, Message
from glmrag.llm.parse import parse_json

MAX_NEW_TOKENS = 512
"""Reply budget: ``DSPyFilter.llm_call`` sets ``max_completion_tokens`` 512."""
UNREADABLE = "filter_unreadable"
"""Usage event of a reply that is no ``{"fact": [[str, ...], ...]}`` object (read as: no fact kept)."""

Fact = tuple[str, str, str]

INSTRUCTION = (
    "You filter the facts a retriever found for a question before they are used to search a knowledge graph. "
    "You receive the question and candidate facts as JSON, each fact a [subject, predicate, object] triple. "
    "Answering may take several steps, so also keep facts about entities the question leads to. "
    "Keep at most 4 facts, copied exactly from the candidates; never write a fact that is not a candidate. "
    'Reply with the JSON object only, {"fact": [["subject", "predicate", "object"], ...]}, '
    'and with {"fact": []} when no candidate helps.'
)
"""The instruction's points are HippoRAG 2's (module docstring); the wording is glmrag's."""

EXAMPLES: tuple[tuple[str, list[list[str]], list[list[str]]], ...] = (
    (
        "What language is spoken in the home country of the band Quiet Mile?",
        [
            ["quiet hill", "located in", "ohio"],
            ["mile end", "district of", "london"],
            ["silent river", "directed by", "tom reyes"],
            ["quiet storm", "is a", "soul music format"],
            ["mile", "is a", "unit of length"],
        ],
        [],
    ),
    (
        "Which river runs through the city where the painter of Blue Harbour was born?",
        [
            ["blue harbour", "painted by", "mira kestel"],
            ["mira kestel", "born in", "varnholm"],
            ["blue harbour", "is a", "1921 oil painting"],
            ["harbour bridge", "opened in", "1932"],
            ["red harbour", "painted by", "olof sand"],
        ],
        [["blue harbour", "painted by", "mira kestel"], ["mira kestel", "born in", "varnholm"]],
    ),
    (
        "When was the founder of Halvard Records born?",
        [
            ["halvard tower", "has height", "120 m"],
            ["halvard records", "founded by", "jon halvard"],
            ["jon dahl", "born on", "1 june 1961"],
            ["jon halvard", "born on", "3 may 1950"],
            ["halvard records", "based in", "eskeby"],
        ],
        [["halvard records", "founded by", "jon halvard"], ["jon halvard", "born on", "3 may 1950"]],
    ),
)
"""Worked examples (question, candidates, kept), written for glmrag; no benchmark question or fact. The one that
keeps nothing comes first: SmolLM2-135M repeats the last example's answer, and with it last the filter kept no
fact on 40 of the 100 MuSiQue-100 questions (first: on 0 of the first 20)."""


def facts_json(facts: Sequence[Sequence[str]]) -> str:
    """``{"fact": [[s, p, o], ...]}``, the JSON the candidates are shown as and the reply is asked in."""
    return json.dumps({"fact": [list(f) for f in facts]}, ensure_ascii=False)


def filter_prompt(question: str, candidates: Sequence[Fact]) -> list[Message]:
    """The chat that asks the LLM which ``candidates`` to keep: instruction, :data:`EXAMPLES`, the question."""
    messages: list[Message] = [{"role": "system", "content": INSTRUCTION}]
    for q, shown, kept in [*EXAMPLES, (question, candidates, None)]:
        messages.append({"role": "user", "content": f"Question: {q}\nCandidate facts: {facts_json(shown)}"})
        if kept is not None:
            messages.append({"role": "assistant", "content": facts_json(kept)})
    return messages


def read_reply(text: str, llm: LLM | None = None) -> list[list[str]] | None:
    """The facts of a reply, or None when it is no object whose ``fact`` is a list of lists of strings."""
    value = parse_json(text, None, llm.usage if llm is not None else None, expect=dict)
    facts = value.get("fact") if isinstance(value, dict) else None
    if not isinstance(facts, list) or not all(
        isinstance(f, list) and all(isinstance(part, str) for part in f) for f in facts
    ):
        return None
    return facts


def match_candidates(generated: Sequence[Sequence[str]], candidates: Sequence[Fact], limit: int) -> list[int]:
    """Positions of the candidates closest to each generated fact by difflib's ratio of their Python texts
    (a list's text against a tuple's, as HippoRAG 2 compares them), in reply order, at most ``limit``."""
    texts = [str(tuple(c)) for c in candidates]
    kept = []
    for fact in generated:
        closest = difflib.get_close_matches(str(list(fact)), texts, n=1, cutoff=0.0)
        if closest:
            kept.append(texts.index(closest[0]))
    return kept[:limit]


@dataclass(frozen=True)
class FilterResult:
    """What the recognition filter decided for one question."""

    kept: list[int]
    """Positions in the candidates, in reply order (a repeat possible); empty: the question falls back to dense."""
    generated: list[list[str]] | None
    """The facts the reply listed; None when the reply could not be read (then nothing is kept)."""
    candidates: int
    """How many candidates were shown."""
    reply: str = ""
    """The LLM's text."""

    @property
    def outcome(self) -> str:
        """``kept all`` / ``kept some`` / ``kept none`` (the reply listed no fact) / ``unreadable``."""
        if self.generated is None:
            return "unreadable"
        if not self.kept:
            return "kept none"
        return "kept all" if set(self.kept) == set(range(self.candidates)) else "kept some"


class RecognitionFilter:
    """Asks ``llm`` which linked facts to keep; every call is counted under ``llm.track(tag, question id)``."""

    def __init__(self, llm: LLM, limit: int, max_new_tokens: int = MAX_NEW_TOKENS, tag: str = "hipporag2") -> None:
        self.llm, self.limit, self.max_new_tokens, self.tag = llm, limit, max_new_tokens, tag

    def __call__(self, question_id: str, question: str, candidates: Sequence[Fact]) -> FilterResult:
        with self.llm.track(self.tag, question_id):
            reply = self.llm.generate(
                [filter_prompt(question, candidates)], max_new_tokens=self.max_new_tokens, temperature=0.0
            )[0].text
            generated = read_reply(reply, self.llm)
            if generated is None:
                self.llm.usage.count(UNREADABLE)
        kept = match_candidates(generated or [], candidates, self.limit)
        return FilterResult(kept, generated, len(candidates), reply)
