"""The reader's one-shot reading-comprehension prompts (GLM-RAG App. E, Fig. 20).

GLM-RAG answers as GFM-RAG does (§4.3), with Fig. 20's one-shot prompt: a system prompt asking for a
"Thought: ... Answer: ..." response, one worked example, then the question's documents, each
:data:`DOCUMENT_TEMPLATE`, and :data:`QUESTION_TEMPLATE`. Fig. 20 shows the 2Wiki template (MuSiQue's and
HotpotQA's are "similar"); the no-context prompt is the system prompt alone. The worked examples are
this project's own, one per dataset family (:data:`FAMILIES`). The subgraph baseline (GLM-RAG Table 8)
gives the reader triples instead, one ``head relation tail`` per line in the same template (its prompt is
not in the paper); the worked example then gets its own triples.
"""

from __future__ import annotations

from dataclasses import dataclass

from glmrag.llm.base import Message

SYSTEM_PROMPT = (
    "As an advanced reading comprehension assistant, your task is to analyze text passages and corresponding "
    'questions meticulously. Your response start after "Thought: ", where you will methodically break down the '
    'reasoning process, illustrating how you arrive at conclusions. Conclude with "Answer: " to present a concise, '
    "definitive response, devoid of additional elaborations."
)
"""GLM-RAG Fig. 20, <system_prompt> (verbatim, as the reader's instruction)."""
DOCUMENT_TEMPLATE = "Wikipedia Title: {title}\n{text}"
"""GLM-RAG Fig. 20, <doc_prompt>."""
QUESTION_TEMPLATE = "Question: {question}\nThought: "
"""GLM-RAG Fig. 20, <question>."""
TRIPLES_HEADER = "Knowledge Graph Triples:"
"""Heads the triples of the subgraph baseline (GLM-RAG Table 8 does not show its prompt)."""
FAMILIES = ("musique", "2wiki", "hotpotqa", "generic")


@dataclass(frozen=True)
class OneShotExample:
    """A worked example: documents (or triples), a question and the response the reader should imitate."""

    documents: tuple[tuple[str, str], ...]
    """(title, text) pairs, in the order shown."""
    triples: tuple[tuple[str, str, str], ...]
    """The same facts as (head, relation, tail), for the subgraph prompt."""
    question: str
    thought: str
    answer: str

    def __post_init__(self) -> None:
        if not self.documents or not self.triples or not self.answer:
            raise ValueError(f"one-shot example {self.question!r} needs documents, triples and an answer")

    @property
    def response(self) -> str:
        """The assistant turn: the thought, then ``Answer: ...`` with Fig. 20's closing period."""
        return f"{self.thought}\nAnswer: {self.answer}."


EXAMPLES: dict[str, OneShotExample] = {
    "musique": OneShotExample(
        documents=(
            (
                "Marrowfield Bridge",
                "Marrowfield Bridge is a stone arch bridge over the River Tane, completed in 1804. It was designed "
                "by the engineer Agnes Holloway, who later also built the harbour at Cullen Bay.",
            ),
            (
                "River Tane",
                "The River Tane rises in the Lammer hills and flows east for 40 kilometres before it reaches the "
                "North Sea.",
            ),
            (
                "Agnes Holloway",
                "Agnes Holloway (1771-1839) was a Scottish civil engineer. She was born in the village of Kirkmuir "
                "and trained under her father, a millwright.",
            ),
            (
                "Kirkmuir",
                "Kirkmuir is a village in the council area of Fife, Scotland. Its parish church dates from the "
                "twelfth century.",
            ),
        ),
        triples=(
            ("marrowfield bridge", "crosses", "river tane"),
            ("marrowfield bridge", "designed by", "agnes holloway"),
            ("agnes holloway", "built harbour at", "cullen bay"),
            ("river tane", "flows into", "north sea"),
            ("agnes holloway", "born in", "kirkmuir"),
            ("kirkmuir", "village in", "fife"),
        ),
        question="In which council area was the designer of Marrowfield Bridge born?",
        thought="Marrowfield Bridge was designed by Agnes Holloway. Agnes Holloway was born in Kirkmuir. "
        "Kirkmuir is a village in the council area of Fife.",
        answer="Fife",
    ),
    "2wiki": OneShotExample(
        documents=(
            (
                "The Salt Road (film)",
                "The Salt Road is a 1957 Italian drama film directed by Marco Ferrante. It follows two brothers "
                "who smuggle salt across the Alps.",
            ),
            ("Marco Ferrante", "Marco Ferrante (1921-1990) was an Italian film director and screenwriter from Genoa."),
            (
                "Evening at Kestrel Lake",
                "Evening at Kestrel Lake is a 1961 Canadian film directed by Ruth Osei and shot in Manitoba.",
            ),
            ("Ruth Osei", "Ruth Osei (1930-2011) was a Canadian film director born in Winnipeg."),
        ),
        triples=(
            ("the salt road", "directed by", "marco ferrante"),
            ("the salt road", "released in", "1957"),
            ("marco ferrante", "born in", "1921"),
            ("evening at kestrel lake", "directed by", "ruth osei"),
            ("evening at kestrel lake", "released in", "1961"),
            ("ruth osei", "born in", "1930"),
        ),
        question="Which film has the director who was born earlier, The Salt Road or Evening at Kestrel Lake?",
        thought="The Salt Road was directed by Marco Ferrante, who was born in 1921. Evening at Kestrel Lake was "
        "directed by Ruth Osei, who was born in 1930. Marco Ferrante was born earlier.",
        answer="The Salt Road",
    ),
    "hotpotqa": OneShotExample(
        documents=(
            (
                "Harrow Lane Stadium",
                "Harrow Lane Stadium is a football ground in Dunmore. It has been the home ground of Dunmore "
                "Athletic since 1923 and holds 8,200 spectators.",
            ),
            ("Whitlow Park", "Whitlow Park is a cricket ground in Dunmore, opened in 1902."),
            (
                "Dunmore Athletic F.C.",
                "Dunmore Athletic Football Club is an association football club founded in 1889 by workers of the "
                "Dunmore ironworks.",
            ),
            (
                "Dunmore ironworks",
                "The Dunmore ironworks operated from 1801 to 1931 and was owned by the Pryce family.",
            ),
        ),
        triples=(
            ("harrow lane stadium", "home ground of", "dunmore athletic"),
            ("harrow lane stadium", "located in", "dunmore"),
            ("whitlow park", "cricket ground in", "dunmore"),
            ("dunmore athletic", "founded in", "1889"),
            ("dunmore athletic", "founded by workers of", "dunmore ironworks"),
        ),
        question="In what year was the club that plays at Harrow Lane Stadium founded?",
        thought="Harrow Lane Stadium is the home ground of Dunmore Athletic. Dunmore Athletic Football Club was "
        "founded in 1889.",
        answer="1889",
    ),
    "generic": OneShotExample(
        documents=(
            ("Lake Orrin", "Lake Orrin is a reservoir in Oregon, United States, created in 1958 by the Orrin Dam."),
            (
                "Tamsin Reservoir",
                "Tamsin Reservoir is a lake in Ontario, Canada, that supplies drinking water to the town of Elbridge.",
            ),
            ("Elbridge", "Elbridge is a town of about 12,000 people on the north shore of Tamsin Reservoir."),
        ),
        triples=(
            ("lake orrin", "located in", "oregon"),
            ("oregon", "state of", "united states"),
            ("tamsin reservoir", "located in", "ontario"),
            ("ontario", "province of", "canada"),
            ("tamsin reservoir", "supplies water to", "elbridge"),
        ),
        question="Are Lake Orrin and Tamsin Reservoir in the same country?",
        thought="Lake Orrin is in Oregon, in the United States. Tamsin Reservoir is in Ontario, in Canada. "
        "They are in different countries.",
        answer="no",
    ),
}


def family_of(dataset: str | None) -> str:
    """The prompt family of a dataset name (``musique100`` -> ``musique``, ``2wiki_test`` -> ``2wiki``,
    ``hotpotqa_dev`` -> ``hotpotqa``); ``generic`` for None and any other name."""
    name = (dataset or "").lower()
    if "musique" in name:
        return "musique"
    if "2wiki" in name:
        return "2wiki"
    if "hotpot" in name:
        return "hotpotqa"
    return "generic"


def render_documents(documents: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> str:
    """Documents in Fig. 20's <doc_prompt> form, one block per document, in the given (rank) order."""
    return "\n".join(DOCUMENT_TEMPLATE.format(title=title, text=text) for title, text in documents)


def render_triples(triples: list[tuple[str, str, str]] | tuple[tuple[str, str, str], ...]) -> str:
    """Triples under :data:`TRIPLES_HEADER`, one ``head relation tail`` line each, in the given order."""
    return "\n".join([TRIPLES_HEADER, *(f"{h} {r} {t}" for h, r, t in triples)])


def user_turn(question: str, documents=(), triples=()) -> str:
    """One input of Fig. 20: the documents (or triples) block, then ``Question: ...\\nThought: ``."""
    if documents and triples:
        raise ValueError("a reader input takes documents or triples, not both")
    block = render_documents(documents) if documents else render_triples(triples) if triples else ""
    return (block + "\n" if block else "") + QUESTION_TEMPLATE.format(question=question)


def chat_prompt(question: str, family: str, documents=(), triples=()) -> list[Message]:
    """The chat the reader is given: system prompt, worked example (user and assistant turns), then the question.

    With neither documents nor triples this is the no-context prompt: system prompt and question only
    (Fig. 20: "for the no-context prompt template, only the <system_prompt> is given").
    """
    if family not in EXAMPLES:
        raise ValueError(f"prompt family {family!r} is unknown; expected one of {FAMILIES}")
    messages: list[Message] = [{"role": "system", "content": SYSTEM_PROMPT}]
    if documents or triples:
        example = EXAMPLES[family]
        shown = {"documents": example.documents} if documents else {"triples": example.triples}
        messages += [
            {"role": "user", "content": user_turn(example.question, **shown)},
            {"role": "assistant", "content": example.response},
        ]
    messages.append({"role": "user", "content": user_turn(question, documents, triples)})
    return messages
