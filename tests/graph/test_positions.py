"""The vectorised positions against plain loop references, on random graphs with parallel and reciprocal
edges and self-loops (with private relation nodes, as every layout of :mod:`glmrag.graph.levi` has them,
and with relation nodes shared between triples or standing in entity slots), and on the real MuSiQue
graphs (slow). Path mode's two ways to its node distances (over the entities alone, or over the whole
Levi graph) are compared with each other and with an independent all-pairs search."""

import dataclasses

import numpy as np
import pytest
from reference_positions import loop_positions, reference_glm_positions

from glmrag.graph import path_positions, positions
from glmrag.graph.levi import LeviLayout, layout_triples
from glmrag.graph.positions import POSITION_CONFLICTS, graph_positions


def random_layout(
    rng: np.random.Generator, question: bool = True, max_entities: int = 6, max_triples: int = 12
) -> LeviLayout:
    """A Levi layout of 1-``max_triples`` triples over 1-``max_entities`` entities (so repeats, reciprocals
    and self-loops are common at the defaults), node token lengths 1-4, in the node order of
    :func:`glmrag.graph.levi.layout_triples`."""
    n_entity, n_triple = int(rng.integers(1, max_entities + 1)), int(rng.integers(1, max_triples + 1))
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


def shared_relation_layout(rng: np.random.Generator) -> LeviLayout:
    """:func:`random_layout` where some triples take another triple's relation node, or an entity node, as
    their relation: relation nodes are then not private (a hand-built layout may do that)."""
    layout = random_layout(rng, question=bool(rng.integers(2)))
    triples = layout.triple_nodes.copy()
    for s in range(len(triples)):
        draw = rng.random()
        if draw < 0.3:
            triples[s, 1] = triples[rng.integers(len(triples)), 1]  # another triple's relation node
        elif draw < 0.45:
            triples[s, 1] = triples[rng.integers(len(triples)), 2]  # an entity node in the relation slot
    return dataclasses.replace(layout, triple_nodes=triples)


def node_lengths(layout: LeviLayout) -> np.ndarray:
    return np.bincount(layout.node_of_token[: layout.num_graph_tokens], minlength=layout.num_nodes)


@pytest.mark.parametrize("seed", range(120))
def test_layouts_without_private_relations_equal_the_references(seed):
    layout = shared_relation_layout(np.random.default_rng(10_000 + seed))
    checks = [("path", "last", loop_positions(layout, "path")), ("triple", "nearest", loop_positions(layout, "triple"))]
    triples = layout.triple_nodes
    if not np.isin(triples[:, 1], triples[:, [0, 2]]).any():
        # ``last`` in triple mode differs from the reference where a node is both an entity and a relation
        # (on main before path mode changed too); path mode has no conflict rule.
        checks.append(("triple", "last", reference_glm_positions(layout)))
    for mode, conflict, reference in checks:
        position, kind = graph_positions(layout, mode, conflict)
        np.testing.assert_array_equal(position, reference[0], err_msg=f"{mode}/{conflict}")
        np.testing.assert_array_equal(kind, reference[1], err_msg=f"{mode}/{conflict}")


def test_the_shared_relation_layouts_are_not_private():
    """The layouts above do exercise the general (whole Levi graph) path: most are not private."""
    private = [
        positions._relations_private(layout.triple_nodes, layout.num_nodes)
        for layout in (shared_relation_layout(np.random.default_rng(10_000 + seed)) for seed in range(120))
    ]
    assert sum(private) < 60


@pytest.mark.parametrize("seed", range(40))
def test_entity_distances_equal_the_levi_graph_search(seed, monkeypatch):
    """Path mode over the entities alone (private relations) equals the search over the whole Levi graph,
    node distances and positions, on graphs of up to 80 triples (several row blocks of the expansion)."""
    rng = np.random.default_rng(20_000 + seed)
    layout = random_layout(rng, question=bool(seed % 2), max_entities=40, max_triples=80)
    lengths = node_lengths(layout)
    assert positions._relations_private(layout.triple_nodes, layout.num_nodes)
    ahead, place, _ = path_positions._node_distances(layout.triple_nodes, lengths)
    levi = path_positions._levi_distances(layout.triple_nodes, lengths)  # (N, N) in layout order
    np.testing.assert_array_equal(np.maximum(ahead[np.ix_(place, place)], -1), np.maximum(levi, -1))

    fast = graph_positions(layout, "path")
    monkeypatch.setattr(path_positions, "ROW_BLOCK", 7)  # blocks that split nodes' rows differently
    monkeypatch.setattr(positions, "_relations_private", lambda *args: False)
    general = graph_positions(layout, "path")
    np.testing.assert_array_equal(fast[0], general[0])
    np.testing.assert_array_equal(fast[1], general[1])
    if seed < 8:  # the loop reference is dense: a few of the larger graphs
        reference = loop_positions(layout, "path")
        np.testing.assert_array_equal(fast[0], reference[0])
        np.testing.assert_array_equal(fast[1], reference[1])


@pytest.mark.parametrize("seed", range(40))
def test_shortest_paths_equal_floyd_warshall(seed):
    """``_dijkstra`` (Dijkstra from nodes with edges in and out, one step from the others) against
    Floyd-Warshall on random weighted graphs with parallel edges, self-loops and nodes only left or entered."""
    rng = np.random.default_rng(30_000 + seed)
    n = int(rng.integers(1, 25))
    n_edge = int(rng.integers(0, 3 * n))
    src, dst, weight = rng.integers(0, n, n_edge), rng.integers(0, n, n_edge), rng.integers(1, 9, n_edge)
    expected = np.full((n, n), np.inf)
    np.fill_diagonal(expected, 0)
    for a, b, w in zip(src, dst, weight, strict=True):
        if a != b:
            expected[a, b] = min(expected[a, b], w)
    for via in range(n):
        expected = np.minimum(expected, expected[:, via, None] + expected[None, via, :])
    found = path_positions._dijkstra(src, dst, weight, n)
    assert found.dtype == np.int32
    np.testing.assert_array_equal(np.where(found < 0, np.inf, found), expected)


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
    from glmrag.datamodules.glm_inputs import SubgraphSettings, load_tokenizer
    from glmrag.graph.levi import layout_subgraph
    from glmrag.graph.subgraph import select_subgraph
    from glmrag.index.cache import get_index

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
