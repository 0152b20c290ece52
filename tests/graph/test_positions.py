"""The vectorised positions against plain loop references, on random graphs with parallel and reciprocal
edges and self-loops, and on the real MuSiQue graphs (slow)."""

import numpy as np
import pytest
from reference_positions import loop_positions, reference_glm_positions

from glmrag.graph.levi import LeviLayout, layout_triples
from glmrag.graph.positions import POSITION_CONFLICTS, graph_positions


def random_layout(rng: np.random.Generator, question: bool = True) -> LeviLayout:
    """A Levi layout of 1-12 triples over 1-6 entities (so repeats, reciprocals and self-loops are common),
    node token lengths 1-4, in the node order of :func:`glmrag.graph.levi.layout_triples`."""
    n_entity, n_triple = int(rng.integers(1, 7)), int(rng.integers(1, 13))
    node_of: dict[int, int] = {}
    lengths: list[int] = []
    entity_of_node: list[int] = []
    triples = []
    for _ in range(n_triple):
        h, t = (int(e) for e in rng.integers(0, n_entity, 2))
        if rng.random() < 0.15:
            t = h  # a self-loop
        row = []
        for role, e in enumerate((h, None, t)):
            if role == 1:
                lengths.append(int(rng.integers(1, 5)))
                entity_of_node.append(-1)
                row.append(len(lengths) - 1)
                continue
            if e not in node_of:
                node_of[e] = len(lengths)
                lengths.append(int(rng.integers(1, 5)))
                entity_of_node.append(e)
            row.append(node_of[e])
        triples.append(row)
    n_question = int(rng.integers(1, 5)) if question else 0
    node_of_token = np.concatenate([np.repeat(np.arange(len(lengths)), lengths), np.full(n_question, -1)])
    return LeviLayout(
        input_ids=rng.integers(5, 100, len(node_of_token)),
        node_of_token=node_of_token.astype(np.int64),
        entity_of_node=np.asarray(entity_of_node, dtype=np.int64),
        triple_nodes=np.asarray(triples, dtype=np.int64),
        num_question_tokens=n_question,
    )


@pytest.mark.parametrize("seed", range(300))
def test_random_graphs_equal_the_references(seed):
    layout = random_layout(np.random.default_rng(seed), question=seed % 3 != 0)
    for mode, conflict, reference in [
        ("triple", "nearest", loop_positions(layout, "triple")),
        ("path", "nearest", loop_positions(layout, "path")),
        ("path", "last", loop_positions(layout, "path")),  # path mode has its own rule
        ("triple", "last", reference_glm_positions(layout)),
    ]:
        position, kind = graph_positions(layout, mode, conflict)
        assert position.dtype == np.int32 and kind.dtype == np.int8
        np.testing.assert_array_equal(position, reference[0], err_msg=f"{mode}/{conflict}")
        np.testing.assert_array_equal(kind, reference[1], err_msg=f"{mode}/{conflict}")


def test_the_rules_differ_on_a_reciprocal_edge_and_a_self_loop():
    """Hand-computed: the last triple decides under ``last``; the smallest |d| under ``nearest``."""

    class Chars:  # one token per character
        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[ord(c) for c in text] for text in texts]}

    triples = [("a", "rr", "b"), ("b", "s", "a"), ("b", "t", "b")]
    layout = layout_triples(triples, Chars())
    # tokens: a 0 | rr 1 2 | b 3 | s 4 | t 5
    last, _ = graph_positions(layout, "triple", "last")
    nearest, _ = graph_positions(layout, "triple", "nearest")
    assert last[0, 3] == -2 and last[3, 0] == 2  # b s a: a is 2 after b
    assert nearest[0, 3] == -2  # a rr b says +3, b s a says -2: |-2| is smaller
    # Self-loop b t b: b meets t as tail (t -> b = +1) under last; nearest ties +1 (head) vs -1: head first.
    assert last[3, 5] == -1 and last[5, 3] == 1
    assert nearest[3, 5] == 1 and nearest[5, 3] == -1
    assert last[3, 3] == -2 and nearest[3, 3] == 0  # the reference overwrites b's own position


def test_unknown_rules_are_refused():
    layout = random_layout(np.random.default_rng(0))
    with pytest.raises(ValueError, match="conflict rule"):
        graph_positions(layout, "triple", "first")
    with pytest.raises(ValueError, match="position mode"):
        graph_positions(layout, "walk")
    assert POSITION_CONFLICTS == ("last", "nearest")


@pytest.mark.slow
def test_musique_graphs_at_600_triplets_equal_the_loop(index_config):
    """Every musique100 question's 600-triplet subgraph: ``nearest`` equals the loop implementation."""
    from glmrag.data.registry import load_dataset
    from glmrag.graph.levi import layout_subgraph
    from glmrag.graph.subgraph import select_subgraph
    from glmrag.index.cache import get_index
    from glmrag.models.glm_inputs import SubgraphSettings, load_tokenizer

    dataset = load_dataset("musique100")
    index = get_index(dataset, index_config())
    tokenizer, settings = load_tokenizer("offline:all-MiniLM-L6-v2"), SubgraphSettings()
    checked = 0
    for question in dataset.qa:
        sub = select_subgraph(index, index.seeds(question.id), 2, 600, seed=settings.bfs_seed(question.id))
        layout = layout_subgraph(index, sub, tokenizer, question.question)
        for mode in ("triple", "path") if checked < 10 else ("triple",):  # the loop's path mode takes seconds
            position, kind = graph_positions(layout, mode, "nearest")
            expected_position, expected_kind = loop_positions(layout, mode)
            np.testing.assert_array_equal(position, expected_position, err_msg=f"{question.id} {mode}")
            np.testing.assert_array_equal(kind, expected_kind, err_msg=f"{question.id} {mode}")
        checked += 1
    assert checked == len(dataset.qa) == 100
