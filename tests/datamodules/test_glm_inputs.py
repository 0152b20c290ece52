"""GLM records: one question -> one stored layout with its targets, and the padded batch contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glmrag.data.types import Question
from glmrag.datamodules.glm_inputs import (
    GLMCollate,
    SubgraphSettings,
    load_tokenizer,
    question_record,
    record_layout,
)
from glmrag.graph.levi import graph_positions, layout_subgraph, linearise_subgraph
from glmrag.graph.subgraph import select_subgraph
from glmrag.index.embed import DEFAULT_MODEL

# MiniLM word pieces: "who is e0" -> who [2040] is [2003] e [1041] ##0 [2692]
EMB = np.linspace(-1, 1, 384, dtype=np.float32)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(DEFAULT_MODEL)


@pytest.fixture
def chain(kg):
    """e4 -r1-> e0 -r0-> e1 -r1-> e2 -r0-> e3, e5 isolated; q1 links e0, q2 nothing; passages p0..p2."""
    return kg(
        [(0, 0, 1), (1, 1, 2), (2, 0, 3), (4, 1, 0)],
        6,
        passages=[[0, 1], [2], [3, 5]],
        links={"q1": [0]},
    )


def question(qid: str = "q1", supporting=("p1", "p2")) -> Question:
    return Question(qid, "who is e0", ("e3",), tuple(supporting))


def assert_same_layout(a, b):
    for name in ("input_ids", "node_of_token", "entity_of_node", "triple_nodes"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert getattr(a, name).dtype == np.int64
    assert (a.num_question_tokens, a.linear) == (b.num_question_tokens, b.linear)


def test_settings_validate_and_key():
    assert SubgraphSettings().key() == "h2-t600-graph-text-eos-last-s0"
    old_rules = {"question_eos": False, "position_conflict": "nearest"}
    assert (
        SubgraphSettings(1, 50, "linear", False, "path", 3, **old_rules).key()
        == "h1-t50-linear-notext-noeos-nearest-s3"
    )
    assert SubgraphSettings(position_mode="path").key() == SubgraphSettings().key()  # positions are not stored ...
    stored = SubgraphSettings(position_mode="path").key(precompute=True)
    assert stored == "h2-t600-graph-text-eos-last-pos-path-s0"  # ... unless precomputed
    bad_values = [{"layout": "tree"}, {"position_mode": "global"}, {"max_hops": -1}, {"use_text": "yes"}]
    bad_values += [{"position_conflict": "first"}, {"question_eos": 1}]
    for bad in bad_values:
        with pytest.raises(ValueError, match=next(iter(bad))):
            SubgraphSettings(**bad)
    settings = SubgraphSettings(seed=1)
    assert settings.bfs_seed("q1") == settings.bfs_seed("q1") != settings.bfs_seed("q2")
    assert settings.bfs_seed("q1") != SubgraphSettings(seed=2).bfs_seed("q1")


def test_record_holds_the_subgraph_layout_and_exactly_the_supporting_entities_present(chain, tok):
    settings = SubgraphSettings(max_hops=2, max_triplets=10)
    record = question_record(chain, question(), "toy", tok, settings, EMB)
    subgraph = select_subgraph(chain, [0], 2, 10, seed=settings.bfs_seed("q1"))
    expected = layout_subgraph(chain, subgraph, tok, "who is e0", question_eos=True)
    assert_same_layout(record_layout(record), expected)
    # two hops from e0 reach e4, e1 and e2; e3 (three hops) and e5 (isolated) are outside
    assert sorted(record["entity_of_node"][record["entity_of_node"] >= 0].tolist()) == [0, 1, 2, 4]
    # supporting passages p1, p2 mention e2, e3, e5; only e2 is in the subgraph
    assert record["entity_of_node"][record["target_nodes"]].tolist() == [2]
    assert record["kg"] == "toy" and record["question_id"] == "q1" and record["gold"] == ["p1", "p2"]
    assert record["num_triples"] == 3 and not record["truncated"]
    assert record["num_tokens"] == len(record["input_ids"]) == 19
    # "who is e0" and MiniLM's end-of-sequence marker [SEP] (102): SubgraphSettings.question_eos
    assert record["num_question_tokens"] == 5 and record["input_ids"][-5:].tolist() == [2040, 2003, 1041, 2692, 102]
    assert record["input_ids"].dtype == np.int32 and record["triple_nodes"].dtype == np.int32
    np.testing.assert_array_equal(record["question_emb"], EMB)

    three_hops = question_record(chain, question(), "toy", tok, SubgraphSettings(max_hops=3), EMB)
    assert sorted(three_hops["entity_of_node"][three_hops["target_nodes"]].tolist()) == [2, 3]


def test_linear_and_textless_and_seedless_records(chain, tok):
    linear = question_record(chain, question(), "toy", tok, SubgraphSettings(layout="linear", use_text=False), EMB)
    subgraph = select_subgraph(chain, [0], 2, 600, seed=SubgraphSettings().bfs_seed("q1"))
    assert_same_layout(record_layout(linear), linearise_subgraph(chain, subgraph, tok))
    assert linear["linear"] and linear["triple_nodes"].size == 0 and linear["num_question_tokens"] == 0
    assert (linear["entity_of_node"] >= 0).all()
    assert linear["entity_of_node"][linear["target_nodes"]].tolist() == [2]

    # q2 has no seed entity: no subgraph; the question tokens alone, or nothing at all
    with_text = question_record(chain, question("q2"), "toy", tok, SubgraphSettings(), EMB)
    bare = question_record(chain, question("q2"), "toy", tok, SubgraphSettings(use_text=False), EMB)
    assert with_text["entity_of_node"].size == 0 and with_text["num_tokens"] == with_text["num_question_tokens"] > 0
    assert bare["num_tokens"] == 0 and bare["target_nodes"].size == 0
    batch = GLMCollate()([bare])
    assert batch["input_ids"].shape == (1, 8) and batch["entity_of_node"].shape == (1, 1)
    assert not batch["token_mask"].any() and not batch["node_mask"].any() and not batch["target"].any()


def test_record_rejects_a_matrix_embedding(chain, tok):
    with pytest.raises(ValueError, match="question q1 of toy: question_emb has shape"):
        question_record(chain, question(), "toy", tok, SubgraphSettings(), EMB[None])


def test_collate_pads_two_records_of_different_lengths_exactly(chain, tok):
    long = question_record(chain, question(), "toy", tok, SubgraphSettings(), EMB)
    short = question_record(chain, question("q1", ("p0",)), "toy", tok, SubgraphSettings(max_hops=1), -EMB)
    short["kg"], short["real"] = "other", False
    n_long, n_short = long["num_tokens"], short["num_tokens"]
    nodes_long, nodes_short = len(long["entity_of_node"]), len(short["entity_of_node"])
    assert n_short < n_long <= 24 and nodes_short < nodes_long
    batch = GLMCollate("path", pad_to_multiple=8)([long, short])
    length = 8 * -(-n_long // 8)

    assert batch["kg"] == ["toy", "other"] and batch["question_ids"] == ["q1", "q1"]
    assert batch["gold"] == [["p1", "p2"], ["p0"]] and batch["real"].tolist() == [True, False]
    dtypes = {
        "input_ids": torch.int64,
        "token_mask": torch.bool,
        "question_mask": torch.bool,
        "relative_position": torch.int16,
        "kind": torch.int8,
        "node_of_token": torch.int64,
        "entity_of_node": torch.int64,
        "node_mask": torch.bool,
        "target": torch.float32,
        "question_emb": torch.float32,
        "real": torch.bool,
    }
    assert {k: batch[k].dtype for k in dtypes} == dtypes
    assert batch["input_ids"].shape == batch["node_of_token"].shape == (2, length)
    assert batch["relative_position"].shape == batch["kind"].shape == (2, length, length)
    assert batch["entity_of_node"].shape == batch["target"].shape == (2, nodes_long)

    for row, (record, n_tok, n_node) in enumerate([(long, n_long, nodes_long), (short, n_short, nodes_short)]):
        layout = record_layout(record)
        position, kind = graph_positions(layout, "path")
        assert batch["input_ids"][row, :n_tok].tolist() == record["input_ids"].tolist()
        assert batch["input_ids"][row, n_tok:].eq(0).all()
        assert batch["token_mask"][row].tolist() == [True] * n_tok + [False] * (length - n_tok)
        n_graph = n_tok - record["num_question_tokens"]
        assert batch["question_mask"][row].tolist() == [False] * n_graph + [True] * (n_tok - n_graph) + [False] * (
            length - n_tok
        )
        np.testing.assert_array_equal(batch["relative_position"][row, :n_tok, :n_tok].numpy(), position)
        np.testing.assert_array_equal(batch["kind"][row, :n_tok, :n_tok].numpy(), kind)
        assert (
            not batch["relative_position"][row, n_tok:].any() and not batch["relative_position"][row, :, n_tok:].any()
        )
        assert not batch["kind"][row, n_tok:].any() and not batch["kind"][row, :, n_tok:].any()
        assert batch["node_of_token"][row].tolist() == record["node_of_token"].tolist() + [-1] * (length - n_tok)
        assert batch["entity_of_node"][row].tolist() == record["entity_of_node"].tolist() + [-1] * (nodes_long - n_node)
        assert batch["node_mask"][row].tolist() == [e >= 0 for e in batch["entity_of_node"][row].tolist()]
        assert torch.nonzero(batch["target"][row]).flatten().tolist() == record["target_nodes"].tolist()
    assert torch.equal(batch["question_emb"], torch.from_numpy(np.stack([EMB, -EMB])))


def test_collate_rejects_bad_arguments():
    with pytest.raises(ValueError, match="position_mode"):
        GLMCollate("global")
    with pytest.raises(ValueError, match="empty batch"):
        GLMCollate()([])


@pytest.mark.parametrize("mode", ["triple", "path"])
def test_precomputed_positions_collate_to_the_same_batch(chain, tok, mode):
    settings = SubgraphSettings(position_mode=mode)
    stored = question_record(chain, question(), "toy", tok, settings, EMB, precompute=True)
    plain = question_record(chain, question(), "toy", tok, SubgraphSettings(position_mode=mode), EMB)
    assert stored["relative_position"].dtype == np.int16 and stored["kind"].dtype == np.int8
    position, kind = graph_positions(record_layout(plain), mode)
    np.testing.assert_array_equal(stored["relative_position"], position.reshape(-1))
    computed, copied = GLMCollate(mode)([plain]), GLMCollate(mode)([stored])
    for name in ("relative_position", "kind", "input_ids"):
        torch.testing.assert_close(copied[name], computed[name], rtol=0, atol=0)
