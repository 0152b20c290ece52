"""Counted cost of HyperAddress steering (Read the Route Fig. 5, Table 8): reader forward passes in the LLM's usage."""

import pytest
from hyper_world import CORPUS, world_index
from transformers import AutoTokenizer

from glmrag.data.types import Question
from glmrag.index.embed import DEFAULT_MODEL, resolve_model_path
from glmrag.llm.base import Usage
from glmrag.retrievers.base import LLMCostedRetriever
from glmrag.retrievers.hyperaddress import HyperAddressRetriever, addressing_heads, steering
from glmrag.retrievers.hyperaddress.reader_pointers import Reader
from glmrag.retrievers.hyperaddress.steering import HEADS_TAG, Steering, SteeringSettings

QUESTIONS = [
    Question("q1", "Where was the first president of the publisher of Journal X born?", ("Boston",), ()),
    Question("q2", "Which volcano is near Boston?", ("Mount Etna",), ()),
]


@pytest.fixture(scope="module")
def parts(tiny_llama):
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    return tiny_llama(tokenizer.vocab_size, max_position_embeddings=512), tokenizer


@pytest.fixture
def llm(scripted_llm, parts):
    """A scripted LLM carrying the tiny model, as a LocalLLM carries its weights."""
    llm = scripted_llm(lambda text: "")
    llm.model, llm.tokenizer = parts
    return llm


@pytest.fixture
def index():
    return world_index()


@pytest.fixture
def tokens_read(monkeypatch):
    """Per question text read, the token counts of the contexts that got a forward pass (those with candidates)."""
    read: dict[str, list[int]] = {}
    build = steering.build_context

    def recording(reader, blocks, question):
        context = build(reader, blocks, question)
        if context.candidates:
            read.setdefault(question, []).append(int(context.input_ids.shape[1]))
        return context

    monkeypatch.setattr(steering, "build_context", recording)
    return read


@pytest.mark.parametrize("rounds", [1, 2])
def test_one_call_per_round_reading_the_prompt_tokens(llm, index, hash_encoder, tokens_read, rounds):
    reader = Reader.from_llm(llm, max_tokens=512)
    steer = Steering(reader, SteeringSettings(rounds=rounds, read_top=2, heads=[(0, 0), (1, 2)], rewrite=False))
    retriever = HyperAddressRetriever(encoder=hash_encoder, steering=steer, name="hyperaddress_test")
    assert isinstance(retriever, LLMCostedRetriever) and reader.llm is llm
    retriever.retrieve(QUESTIONS, index, CORPUS, top_k=3)
    cost = retriever.llm_cost()
    assert set(cost) == {"q1", "q2"}
    for q in QUESTIONS:
        read = tokens_read[q.question]
        assert len(read) == rounds and cost[q.id].calls == rounds
        assert cost[q.id].prompt_tokens == sum(read) and cost[q.id].generated_tokens == 0
        assert cost[q.id].seconds > 0 and cost[q.id].cache_hits == 0
        assert llm.usage.get("hyperaddress_test", q.id) == cost[q.id]  # counted in the LLM's own usage
    # the cost is that of the last retrieve, not the sum over calls
    retriever.retrieve(QUESTIONS[:1], index, CORPUS, top_k=3)
    assert list(retriever.llm_cost()) == ["q1"] and retriever.llm_cost()["q1"].calls == rounds
    assert llm.usage.get("hyperaddress_test", "q1").calls == 2 * rounds
    assert llm.prompts == []  # forward passes only: nothing was generated
    assert retriever.index_llm_cost()[HEADS_TAG] == Usage()  # the heads were given


def test_head_selection_is_index_cost(llm, index, hash_encoder, tokens_read, tmp_path, monkeypatch):
    scored: list[int] = []
    score = addressing_heads.score_heads

    def counting(reader, probes):
        hits, rr, used = score(reader, probes)
        scored.append(used)
        return hits, rr, used

    monkeypatch.setattr(addressing_heads, "score_heads", counting)
    reader = Reader.from_llm(llm, max_tokens=512)
    steer = Steering(
        reader, SteeringSettings(rounds=1, read_top=2, num_heads=2, probes=6, probe_passages=3), cache_dir=tmp_path
    )
    retriever = HyperAddressRetriever(encoder=hash_encoder, steering=steer)
    retriever.retrieve(QUESTIONS, index, CORPUS, top_k=3)
    assert len(scored) == 2  # the selection half and the held-out half of the probes
    used = sum(scored)
    assert scored[0] > 0 and scored[1] > 0
    heads = retriever.index_llm_cost()[HEADS_TAG]
    assert heads.calls == used and llm.usage.by_question(HEADS_TAG).keys() == {None}  # outside any question
    assert all(retriever.llm_cost()[q.id].calls == 1 for q in QUESTIONS)  # not charged to the first question
    assert llm.usage.by_method()["hyperaddress"].calls == 2
    summary = retriever.trace_summary()["head_selection"]
    assert summary["selection_calls"] == used and summary["selection_prompt_tokens"] == heads.prompt_tokens > 0
    assert summary["from_cache"] is False
    # a second run reads the cached heads: no index cost in this process, but the summary keeps what they cost
    again = HyperAddressRetriever(
        encoder=hash_encoder,
        steering=Steering(
            reader, SteeringSettings(rounds=1, read_top=2, num_heads=2, probes=6, probe_passages=3), cache_dir=tmp_path
        ),
    )
    calls_before = llm.usage.by_method()[HEADS_TAG].calls
    again.retrieve(QUESTIONS, index, CORPUS, top_k=3)
    assert len(scored) == 2 and llm.usage.by_method()[HEADS_TAG].calls == calls_before
    cached = again.trace_summary()["head_selection"]
    assert cached["from_cache"] is True and cached["selection_calls"] == used
    assert {k: v for k, v in cached.items() if k != "from_cache"} == {
        k: v for k, v in summary.items() if k != "from_cache"
    }


def test_walk_only_and_bare_readers_cost_zeros(index, hash_encoder, parts, tokens_read):
    walk = HyperAddressRetriever(encoder=hash_encoder)
    walk.retrieve(QUESTIONS, index, CORPUS, top_k=3)
    assert walk.llm_cost() == {"q1": Usage(), "q2": Usage()}
    assert walk.index_llm_cost() == {"hyperaddress_descriptions": Usage(), HEADS_TAG: Usage()}
    bare = Reader(*parts, name="tiny")  # no LLM behind it: nothing to count into
    steered = HyperAddressRetriever(
        encoder=hash_encoder, steering=Steering(bare, SteeringSettings(rounds=1, heads=[(0, 0)]))
    )
    steered.retrieve(QUESTIONS, index, CORPUS, top_k=3)
    assert len(tokens_read) == 2  # it did read
    assert steered.llm_cost() == {"q1": Usage(), "q2": Usage()}
