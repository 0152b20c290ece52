"""The vectorised GLM inputs (layout from the label-token store, no-sort ``last`` positions, calloc'd batch, int16
positions) equal the pipeline before it (``reference_glm_inputs``) on random KGs and on every musique100 question
(slow), and the GLM retriever scores them as before."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from reference_glm_inputs import old_collate, old_layout_subgraph, old_triple_positions
from transformers import T5Config

from glmrag.data.types import Question
from glmrag.datamodules.glm_inputs import (
    GLMCollate,
    SubgraphSettings,
    load_tokenizer,
    position_dtype,
    question_record,
    record_layout,
)
from glmrag.graph.subgraph import select_subgraph
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.index.kg import EntityLink
from glmrag.index.synthetic import random_kg
from glmrag.nn.glm import T5GLMEncoder
from glmrag.nn.glm_retriever import GLMInputs, GLMRetriever

WORDS = ["paris", "the", "river", "x", "of", "mountainous", "republic", "king", "zz9", "born", "é", "-"]
"""Label words of one to several MiniLM word pieces, so nodes have 1 to ~10 tokens."""
EMB = np.zeros(384, dtype=np.float32)
LAYOUT_FIELDS = ("input_ids", "node_of_token", "entity_of_node", "triple_nodes")
BATCH_KEYS = (
    "input_ids",
    "token_mask",
    "question_mask",
    "relative_position",
    "kind",
    "node_of_token",
    "entity_of_node",
    "node_mask",
    "target",
)

NEW_DTYPES = {"relative_position": torch.int16}
"""Batch tensors whose dtype changed (the old pipeline's relative positions were int32)."""


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(DEFAULT_MODEL)


def labelled_random_kg(seed: int, n_questions: int):
    """:func:`random_kg` (hubs, parallel triples, self-loops, isolated entities) with phrase labels of random
    length, some repeated, and ``n_questions`` questions q0.. linked to 1-3 random seed entities each (odd ones
    also to every isolated entity)."""
    rng = np.random.default_rng(seed)
    index = random_kg(40, 150, seed=seed)

    def phrase() -> str:
        return " ".join(rng.choice(WORDS, int(rng.integers(1, 4))))

    index.entities = [phrase() for _ in index.entities]
    index.relations = [phrase() for _ in index.relations]
    isolated = np.setdiff1d(np.arange(40), index.triples[:, [0, 2]])  # seeds no triple touches: nodes after all
    index.question_links = {
        f"q{i}": [
            EntityLink("m", int(e), 1.0)
            for e in [*rng.choice(40, int(rng.integers(1, 4))), *(isolated if i % 2 else [])]
        ]
        for i in range(n_questions)
    }
    return index


def check_against_old(index, questions, tokenizer, settings, kg: str = "kg") -> int:
    """Assert that every question's layout and every batch of two (both conflict rules) equal the old pipeline's;
    returns how many questions were checked."""
    records = []
    for q in questions:
        record = question_record(index, q, kg, tokenizer, settings, EMB)
        subgraph = select_subgraph(
            index, index.seeds(q.id), settings.max_hops, settings.max_triplets, seed=settings.bfs_seed(q.id)
        )
        old = old_layout_subgraph(index, subgraph, tokenizer, q.question, settings.question_eos)
        new = record_layout(record)
        for name in LAYOUT_FIELDS:
            np.testing.assert_array_equal(getattr(new, name), getattr(old, name), err_msg=f"{q.id} {name}")
        assert new.num_question_tokens == old.num_question_tokens, q.id
        records.append(record)
    for conflict in ("last", "nearest"):
        for i in range(0, len(records), 2):
            pair = records[i : i + 2]
            new = GLMCollate(position_conflict=conflict)(pair)
            old = old_collate(pair, functools.partial(old_triple_positions, conflict=conflict))
            for key in BATCH_KEYS:
                # Positions narrowed from int32 to int16 (glm_inputs.position_dtype); the values are the same.
                assert new[key].dtype == NEW_DTYPES.get(key, old[key].dtype), key
                same = torch.equal(new[key].to(old[key].dtype), old[key])
                assert same, f"{[r['question_id'] for r in pair]} {key} {conflict}"
    return len(records)


@pytest.mark.parametrize("seed", range(12))
def test_random_kgs_give_the_old_inputs(tok, seed):
    index = labelled_random_kg(seed, 6)
    rng = np.random.default_rng(seed)
    questions = [Question(f"q{i}", " ".join(rng.choice(WORDS, 4)), ("a",), ("p0", "p3")) for i in range(6)]
    settings = SubgraphSettings(max_hops=int(rng.integers(1, 3)), max_triplets=int(rng.integers(5, 120)))
    assert check_against_old(index, questions, tok, settings) == 6


@pytest.mark.slow
def test_musique_questions_at_600_triplets_give_the_old_inputs(index_config, tok):
    """Every musique100 question, GLM-RAG's budget (App. C: 2 hops, 600 triplets), question EOS on."""
    from glmrag.data.registry import load_dataset
    from glmrag.index.cache import get_index

    dataset = load_dataset("musique100")
    index = get_index(dataset, index_config())
    assert check_against_old(index, list(dataset.qa), tok, SubgraphSettings()) == 100


@pytest.mark.parametrize(
    ("backend", "attention", "training"),
    [("eager", "global", False), ("eager", "local", False), ("eager", "global", True), ("flex", "local", False)],
)
def test_int16_positions_give_the_scores_of_int32_positions(tok, backend, attention, training):
    """The GLM retriever (SDPA path in eval, the eager reference when training with attention dropout, Flex)
    scores a batch with the collate's int16 positions exactly as with the old pipeline's int32 positions."""
    index = labelled_random_kg(3, 2)
    questions = [Question(f"q{i}", "river of paris", ("a",), ("p0",)) for i in range(2)]
    records = [question_record(index, q, "kg", tok, SubgraphSettings(), EMB) for q in questions]
    batch = GLMCollate()(records)
    old = old_collate(records, functools.partial(old_triple_positions, conflict="last"))
    assert batch["relative_position"].dtype == torch.int16 and old["relative_position"].dtype == torch.int32
    assert batch["relative_position"].abs().max() > 8 and (batch["kind"] == 1).any()  # several buckets in use

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=tok.vocab_size, d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8, dropout_rate=0.1
    )
    model = GLMRetriever(T5GLMEncoder.from_config(config, attention=attention, backend=backend)).train(training)
    scores = []
    for position in (batch["relative_position"], old["relative_position"]):
        torch.manual_seed(1)  # the same dropout masks in training
        with torch.no_grad():
            scores.append(model(GLMInputs.from_batch({**batch, "relative_position": position})))  # (B, N)
    assert scores[0].abs().max() > 0
    assert torch.equal(scores[0], scores[1])


def test_the_diagonal_of_a_self_loop_reaches_the_record_length(tok, kg):
    """Why :func:`position_dtype` bounds positions by the length itself, not the length - 1 of two distinct
    tokens: under ``last``, a self-loop's entity reads ``-(l_e + l_r)`` to itself (the reference's overwrite)."""
    index = kg([(0, 0, 0)], 1, links={"q": [0]})
    index.entities, index.relations = ["mountainous republic of the river"], ["of"]
    record = question_record(index, Question("q", "x", ("a",), ()), "kg", tok, SubgraphSettings(use_text=False), EMB)
    batch = GLMCollate(pad_to_multiple=1)([record])
    assert batch["relative_position"].abs().max() == record["num_tokens"] == 6  # 5 entity pieces + 1 relation
    assert position_dtype(32_767) == np.int16 and position_dtype(32_768) == np.int32  # int16's max is 32,767
