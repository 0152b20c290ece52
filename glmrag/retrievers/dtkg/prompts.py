"""Every prompt DTKG sends, short enough for a 135M-parameter model on two CPU cores.

Each builder returns one chat (a list of messages), named after the step it serves (Eqs. 4, 5, 8, 13, 14,
16; §3.3.2; App. A.4). The classification rules paraphrase DTKG Table 8; the six examples are written for
this project in the spirit of App. C.3, not copied from the paper.
"""

from __future__ import annotations

from collections.abc import Sequence

from glmrag.llm.base import Message

CLASSIFY_RULES_YES_NO = """Decide whether a multi-hop question must be answered step by step.
Rules:
1. If the answer depends on an intermediate entity that must be found first, answer yes.
2. A question about one attribute of one named entity: no.
3. Comparing entities that can each be looked up on their own: no.
4. Several independent facts about the same entity: no.
5. If a single fact (one triple) answers it: no.
Reply with one word: yes or no."""
"""DTKG §3.2's question: "If the classifier outputs 'yes', the question is classified as a chained multi-hop
reasoning question; if it outputs 'no', ... a parallel fact-verification question"; the rules of Table 8."""

CLASSIFY_RULES = """Decide how a multi-hop question must be answered.
Rules:
1. If the answer depends on an intermediate entity that must be found first, it is chained.
2. A question about one attribute of one named entity is parallel.
3. Comparing entities that can each be looked up on their own is parallel.
4. Several independent facts about the same entity are parallel.
5. If a single fact (one triple) answers it, it is parallel.
Reply with one word: chained or parallel."""
"""The same rules with the track names as the reply (``classifier_labels: chained_parallel``, glmrag's earlier
prompt; not the paper's words)."""

CLASSIFY_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Who was the teacher of the painter of The Night Watch?", "chained"),
    ("Which is older, Oxford University or the University of Bologna?", "parallel"),
    ("In what year did the team that signed Ronaldo in 2009 win its first league title?", "chained"),
    ("When did Ada Lovelace live and what did she write about?", "parallel"),
    ("What language is spoken in the country whose capital is Lima?", "chained"),
    ("What is the height of Mount Kilimanjaro?", "parallel"),
)
"""Six annotated examples (rule 1 three times; rules 3, 4 and 2/5 once each)."""

CLASS_CHOICES = {"yes_no": ("yes", "no"), "chained_parallel": ("chained", "parallel")}
"""Per ``classifier_labels``, the reply words: the first means the chained track, the second the parallel one."""
_CLASSIFY = {"yes_no": (CLASSIFY_RULES_YES_NO, "Chained"), "chained_parallel": (CLASSIFY_RULES, "Type")}


def chat(content: str) -> list[Message]:
    return [{"role": "user", "content": content}]


def numbered(lines: Sequence[str]) -> str:
    return "\n".join(f"{i}. {line}" for i, line in enumerate(lines, start=1))


def classify(question: str, labels: str = "yes_no") -> list[Message]:
    """The 6-shot classifier prompt (§3.2, App. C.1/C.3), its examples labelled with ``labels``' words."""
    rules, field = _CLASSIFY[labels]
    chained, parallel = CLASS_CHOICES[labels]
    shots = "\n".join(
        f"Question: {q}\n{field}: {chained if t == 'chained' else parallel}" for q, t in CLASSIFY_EXAMPLES
    )
    return chat(f"{rules}\n\n{shots}\nQuestion: {question}\n{field}:")


def draft(question: str) -> list[Message]:
    return chat(f"Answer the question in one short sentence.\nQuestion: {question}")


def decompose(question: str, response: str) -> list[Message]:
    return chat(
        "Split the answer into short atomic facts, each with a subject, a verb and an object.\n"
        f"Question: {question}\nAnswer: {response}\n"
        'Reply with a JSON list of strings, e.g. ["Paris is the capital of France."]'
    )


def subject(fact: str) -> list[Message]:
    return chat(f"Name the subject entity of this statement. Reply with the name only.\nStatement: {fact}")


def verify(fact: str, triples: Sequence[str]) -> list[Message]:
    return chat(
        f"Knowledge graph facts:\n{numbered(triples)}\nStatement: {fact}\n"
        "Do the facts support the statement? Reply yes or no."
    )


def rewrite(fact: str, triples: Sequence[str]) -> list[Message]:
    return chat(
        f"Knowledge graph facts:\n{numbered(triples)}\nStatement: {fact}\n"
        "Rewrite the statement in one sentence so that it agrees with the facts."
    )


def answer_from(question: str, facts: Sequence[str]) -> list[Message]:
    return chat(f"Facts:\n{numbered(facts)}\nUsing the facts, answer with a short phrase.\nQuestion: {question}")


def central_entity(question: str) -> list[Message]:
    return chat(f"Name the main entity the question starts from. Reply with the name only.\nQuestion: {question}")


def select_relations(question: str, candidates: Sequence[str], most: int) -> list[Message]:
    return chat(
        f"Question: {question}\nCandidate facts:\n{numbered(candidates)}\n"
        f"Which facts (at most {most}) help answer the question? Reply with a JSON list of their numbers."
    )


def sufficient(question: str, triples: Sequence[str]) -> list[Message]:
    return chat(
        f"Facts:\n{numbered(triples)}\nQuestion: {question}\n"
        "Are these facts enough to answer the question? Reply yes or no."
    )


def necessity(question: str, triple: str) -> list[Message]:
    return chat(
        f"Question: {question}\nFact: {triple}\n"
        "How necessary is this fact for answering the question? Reply with a number from 0 to 10."
    )


def rerank(query: str, candidates: Sequence[str], listed: int) -> list[Message]:
    return chat(
        f"Query: {query}\nCandidates:\n{numbered(candidates)}\n"
        f"List the numbers of up to {listed} candidates relevant to the query, most relevant first, "
        "as a JSON list."
    )
