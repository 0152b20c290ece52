"""The QA reader: GLM-RAG Fig. 20 prompts, answer parsing, contexts, and EM/F1 through the evaluator."""

import re

import numpy as np
import pytest

from glmrag.data.types import Corpus, Passage, Question
from glmrag.eval import evaluate
from glmrag.graph.levi import linearise_subgraph
from glmrag.graph.subgraph import select_subgraph
from glmrag.llm.base import UsageCounter
from glmrag.qa import (
    ANSWER_FALLBACK,
    QAContext,
    QAReader,
    baseline_contexts,
    no_context,
    parse_answer,
    passage_context,
    subgraph_context,
)
from glmrag.qa.prompts import EXAMPLES, SYSTEM_PROMPT, family_of
from glmrag.retrievers.base import Ranking

CORPUS = Corpus([Passage(f"p{i}", f"Title {i}", f"Text of passage {i}.") for i in range(6)])


def _asked(prompt_text: str) -> str:
    """The question of the last turn of a reader prompt."""
    return re.findall(r"Question: (.*)\nThought: ", prompt_text)[-1]


def test_prompt_lists_the_top_passages_in_rank_order_after_the_one_shot_example(scripted_llm):
    llm = scripted_llm(lambda text: "Thought: Title 3 says so.\nAnswer: Kirkmuir.")
    reader = QAReader(llm, dataset="musique100", passages=3)
    question = Question("q0", "Where was it built?", ("Kirkmuir",), ("p3",))
    ranking = Ranking("q0", ["p3", "p1", "p4", "p0", "p2"], [5.0, 4.0, 3.0, 2.0, 1.0])

    assert reader.read([question], [ranking], CORPUS, tag="qa:dense") == {"q0": "Kirkmuir"}
    chat = reader.prompt(question, passage_context(ranking, CORPUS, 3))
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user"]
    assert chat[0]["content"] == SYSTEM_PROMPT
    example = EXAMPLES["musique"]
    assert chat[1]["content"].startswith(f"Wikipedia Title: {example.documents[0][0]}\n{example.documents[0][1]}\n")
    assert chat[1]["content"].endswith(f"Question: {example.question}\nThought: ")
    assert chat[2]["content"] == f"{example.thought}\nAnswer: Fife."
    assert chat[3]["content"] == (
        "Wikipedia Title: Title 3\nText of passage 3.\n"
        "Wikipedia Title: Title 1\nText of passage 1.\n"
        "Wikipedia Title: Title 4\nText of passage 4.\n"
        "Question: Where was it built?\nThought: "
    )
    (sent,) = llm.prompts  # the scripted LLM saw exactly that chat, messages joined by newlines
    assert sent == "\n".join(m["content"] for m in chat)
    assert llm.usage.get("qa:dense", "q0").calls == 1


@pytest.mark.parametrize(
    ("dataset", "family"),
    [
        ("musique100", "musique"),
        ("2wiki_test", "2wiki"),
        ("hotpotqa_dev", "hotpotqa"),
        ("toy", "generic"),
        (None, "generic"),
    ],
)
def test_each_dataset_family_gets_its_own_worked_example(scripted_llm, dataset, family):
    assert family_of(dataset) == family
    reader = QAReader(scripted_llm(lambda text: "Answer: x"), dataset=dataset)
    text = "\n".join(m["content"] for m in reader.prompt("Who?", passage_context(Ranking("q", ["p0"], [1.0]), CORPUS)))
    assert EXAMPLES[family].question in text
    assert all(EXAMPLES[other].question not in text for other in EXAMPLES if other != family)


@pytest.mark.parametrize(
    ("text", "answer", "fallbacks"),
    [
        ("Thought: it is the capital.\nAnswer: Paris.", "Paris", 0),
        ("Answer: Lyon\nThought: no, wait.\nAnswer: Paris", "Paris", 0),  # the last Answer: wins
        ("Thought: B-29.\n**Answer:** Boeing B-29 Superfortress.\nMore text", "Boeing B-29 Superfortress", 0),
        ("answer:   1895 .", "1895", 0),
        ("Thought: I think\nit is London.", "it is London", 1),  # no marker: the last non-empty line
        ("Thought: the church of England\nAnswer:  \n", "the church of England", 1),  # empty after the marker
        ("", "", 1),
    ],
)
def test_parse_answer_takes_the_last_answer_and_counts_fallbacks(text, answer, fallbacks):
    counter = UsageCounter()
    with counter.track("qa", "q"):
        assert parse_answer(text, counter) == answer
    assert counter.get("qa", "q").events.get(ANSWER_FALLBACK, 0) == fallbacks


def test_no_context_prompt_is_the_system_prompt_and_the_question_only(scripted_llm):
    reader = QAReader(scripted_llm(lambda text: "Answer: 1895"), dataset="musique100")
    chat = reader.prompt("When was rugby league started?", no_context())
    assert chat == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Question: When was rugby league started?\nThought: "},
    ]
    questions = [Question("q1", "When?", ("1895",), ())]
    assert reader.answer(questions, baseline_contexts("no_context", questions, index=None)) == {"q1": "1895"}


def _word_tokenizer(texts, add_special_tokens=False):
    """A whitespace tokenizer with a growing vocabulary, in the call form linearise_subgraph uses."""
    vocab = _word_tokenizer.vocab
    return {"input_ids": [[vocab.setdefault(w, len(vocab)) for w in t.split()] for t in texts]}


_word_tokenizer.vocab = {}


def test_subgraph_context_is_the_selected_subgraph_as_linearised_triples(kg, scripted_llm):
    # chain e0 -r0-> e1 -r1-> e2 -r0-> e3, and e4 -r1-> e5 apart; q links to e0, q_none to nothing
    index = kg([[0, 0, 1], [1, 1, 2], [2, 0, 3], [4, 1, 5]], 6, links={"q": [0], "q_none": []})
    context = subgraph_context(index, "q")  # 2 hops: e0-e1 at hop 1, e1-e2 at hop 2; e2-e3 is a third hop
    assert context.kind == "triples" and context.triples == (("e0", "r0", "e1"), ("e1", "r1", "e2"))
    assert subgraph_context(index, "q", max_triplets=1).triples == (("e0", "r0", "e1"),)
    assert subgraph_context(index, "q_none").kind == "none"
    # the same words, in the same order, as the linearised layout of GLM-RAG Table 15
    layout = linearise_subgraph(index, select_subgraph(index, [0]), _word_tokenizer)
    ids = _word_tokenizer([" ".join(" ".join(t) for t in context.triples)])["input_ids"][0]
    np.testing.assert_array_equal(layout.input_ids, ids)

    reader = QAReader(scripted_llm(lambda text: "Answer: e2"), dataset="musique100")
    chat = reader.prompt("What does e1 lead to?", context)
    assert (
        chat[3]["content"] == "Knowledge Graph Triples:\ne0 r0 e1\ne1 r1 e2\nQuestion: What does e1 lead to?\nThought: "
    )
    assert chat[1]["content"].startswith("Knowledge Graph Triples:\nmarrowfield bridge crosses river tane\n")
    assert "Wikipedia Title" not in "\n".join(m["content"] for m in chat)
    questions = [Question("q", "What?", ("e2",), ()), Question("q_none", "What?", ("x",), ())]
    kinds = [c.kind for c in baseline_contexts("subgraph", questions, index, max_triplets=1)]
    assert kinds == ["triples", "none"]


def test_em_f1_through_the_evaluator_match_the_scripted_answers(kg, scripted_llm):
    index = kg([[0, 0, 1]], 2, passages=[[0], [1], [0], [1]], links={f"q{i}": [0] for i in range(4)})
    questions = [
        Question("q0", "Who designed the bridge?", ("Agnes Holloway",), ("p0",)),
        Question("q1", "Which plane?", ("Boeing B-29 Superfortress",), ("p1",)),
        Question("q2", "When was it founded?", ("1889",), ("p2",)),
        Question("q3", "Where is it?", ("Fife",), ("p3",)),
    ]
    replies = {
        "Who designed the bridge?": "Thought: the passage names her.\nAnswer: Agnes Holloway.",  # EM 1
        "Which plane?": "Thought: a bomber.\nAnswer: Boeing B-29",  # EM 0, F1 2pr/(p+r) = 2*1*(2/3)/(5/3) = 0.8
        "When was it founded?": "Answer: 1889",  # EM 1
        "Where is it?": "I do not know",  # no marker: fallback, EM 0, F1 0
    }
    llm = scripted_llm(lambda text: replies[_asked(text)])
    corpus = Corpus([Passage(f"p{i}", f"T{i}", f"text {i}") for i in range(4)])
    rankings = [Ranking(q.id, [q.supporting[0]], [1.0]) for q in questions]
    answers = QAReader(llm, dataset="musique100").read(questions, rankings, corpus, tag="qa:dense")
    assert answers == {"q0": "Agnes Holloway", "q1": "Boeing B-29", "q2": "1889", "q3": "I do not know"}

    result = evaluate({"dense": rankings}, questions, index, ks=(1,), n_boot=50, answers_by_system={"dense": answers})
    assert result.overall["dense"]["em"].mean == pytest.approx(0.5)
    assert result.overall["dense"]["f1"].mean == pytest.approx((1 + 0.8 + 1 + 0) / 4)
    assert [row["em"] for row in result.per_question["dense"]] == [1.0, 0.0, 1.0, 0.0]
    usage = llm.usage.by_question("qa:dense")
    assert sorted(usage) == ["q0", "q1", "q2", "q3"] and all(u.calls == 1 for u in usage.values())
    assert [usage[q].events.get(ANSWER_FALLBACK, 0) for q in ("q0", "q1", "q2", "q3")] == [0, 0, 0, 1]


def test_concurrent_reading_keeps_answers_and_per_question_usage(scripted_llm):
    questions = [Question(f"q{i}", f"What is {i}?", (str(i),), ()) for i in range(7)]
    llm = scripted_llm(lambda text: f"Answer: {_asked(text).split()[-1].rstrip('?')}")
    answers = QAReader(llm, concurrency=3).answer(questions, [no_context()] * 7, tag="qa:none")
    assert answers == {f"q{i}": str(i) for i in range(7)}
    usage = llm.usage.by_question("qa:none")
    assert {q: u.calls for q, u in usage.items()} == {f"q{i}": 1 for i in range(7)}
    assert usage["q3"].prompt_tokens == len(llm.prompts[0].split())  # every prompt has the same word count


def test_bad_arguments_name_the_problem(scripted_llm, kg):
    llm = scripted_llm(lambda text: "Answer: x")
    with pytest.raises(ValueError, match="passages is 0"):
        QAReader(llm, passages=0)
    with pytest.raises(ValueError, match="2 questions but 1 contexts"):
        QAReader(llm).answer([Question("a", "?", ("x",), ()), Question("b", "?", ("x",), ())], [no_context()])
    with pytest.raises(ValueError, match=r"question q: ranked passages \['p9'\] are not in the corpus"):
        passage_context(Ranking("q", ["p0", "p9"], [2.0, 1.0]), CORPUS)
    with pytest.raises(ValueError, match="not both"):
        QAContext(passages=(CORPUS[0],), triples=(("a", "r", "b"),))
    with pytest.raises(ValueError, match="qa_baselines takes a list of"):
        baseline_contexts("oracle", [], kg([[0, 0, 1]], 2))
    with pytest.raises(ValueError, match="no ranking for 1 questions"):
        QAReader(llm).read([Question("a", "?", ("x",), ())], [], CORPUS, tag="qa:dense")
