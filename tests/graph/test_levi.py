import numpy as np
import pytest
import transformers

from glmrag.graph.levi import (
    encode_triples,
    graph_positions,
    layout_subgraph,
    linearise,
    linearise_subgraph,
    with_positions,
)
from glmrag.graph.subgraph import Subgraph
from glmrag.index.embed import DEFAULT_MODEL, resolve_model_path

# BERT word pieces of the offline MiniLM tokenizer used below:
#   paris [3000]   france [2605]   europe [2885]
#   "capital of" [3007, 1997]   "located in" [2284, 1999]
#   "is the capital city of" [2003, 1996, 3007, 2103, 1997]
#   "who is the president" [2040, 2003, 1996, 2343]


@pytest.fixture(scope="module")
def tok():
    return transformers.AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))


def test_single_triple_reads_as_its_sentence(tok):
    g = encode_triples([("paris", "capital of", "france")], tok, question="who is the president")
    assert g.input_ids.tolist() == [3000, 3007, 1997, 2605, 2040, 2003, 1996, 2343]
    assert g.node_of_token.tolist() == [0, 1, 1, 2, -1, -1, -1, -1]
    assert g.entity_of_node.tolist() == [0, -1, 1]
    assert g.num_graph_tokens == 4
    steps = np.arange(4)
    diff = steps[None, :] - steps[:, None]
    np.testing.assert_array_equal(g.relative_position[:4, :4], diff)
    np.testing.assert_array_equal(g.relative_position[4:, 4:], diff)  # question: ordinary j - i
    assert not g.relative_position[:4, 4:].any() and not g.relative_position[4:, :4].any()
    expected_kind = np.zeros((8, 8), dtype=np.int8)
    expected_kind[4:, 4:] = 4
    expected_kind[4:, :4] = 2
    expected_kind[:4, 4:] = 3
    np.testing.assert_array_equal(g.kind, expected_kind)


def test_two_triple_chain_exact_matrices(tok):
    g = encode_triples([("paris", "capital of", "france"), ("france", "located in", "europe")], tok)
    # tokens: paris | capital of | france | located in | europe  (france once, shared)
    assert g.input_ids.tolist() == [3000, 3007, 1997, 2605, 2284, 1999, 2885]
    assert g.node_of_token.tolist() == [0, 1, 1, 2, 3, 3, 4]
    assert g.entity_of_node.tolist() == [0, -1, 1, -1, 2]
    # fmt: off
    expected_position = np.array([
        [ 0,  1,  2,  3,  0,  0,  0],
        [-1,  0,  1,  2,  0,  0,  0],
        [-2, -1,  0,  1,  0,  0,  0],
        [-3, -2, -1,  0,  1,  2,  3],
        [ 0,  0,  0, -1,  0,  1,  2],
        [ 0,  0,  0, -2, -1,  0,  1],
        [ 0,  0,  0, -3, -2, -1,  0],
    ])
    expected_kind = np.array([
        [0, 0, 0, 0, 1, 1, 1],
        [0, 0, 0, 0, 1, 1, 1],
        [0, 0, 0, 0, 1, 1, 1],
        [0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
    ], dtype=np.int8)
    # fmt: on
    np.testing.assert_array_equal(g.relative_position, expected_position)
    np.testing.assert_array_equal(g.kind, expected_kind)


@pytest.mark.parametrize("question", [None, "who is the president"])
def test_chain_positions_equal_linearised_text_positions(tok, question):
    """Along a path, GLM positions coincide with the positions of the path written as text."""
    chain = [
        ("barack obama", "was born in", "honolulu"),
        ("honolulu", "is located in", "hawaii"),
        ("hawaii", "is a state of", "united states of america"),
    ]
    g = encode_triples(chain, tok, question=question)
    text = linearise(chain, tok, question=question)
    np.testing.assert_array_equal(g.input_ids, text)  # the chain reads as its sentence, token for token
    steps = np.arange(len(text))
    text_position = steps[None, :] - steps[:, None]  # (L, L)
    local = (g.kind == 0) | (g.kind == 4)
    np.testing.assert_array_equal(g.relative_position[local], text_position[local])
    # Exactly the pairs whose nodes share no triple fall back to the global bucket.
    node_triples = [{0, 1, 2}, {2, 3, 4}, {4, 5, 6}]
    n_graph = g.num_graph_tokens
    nodes = g.node_of_token[:n_graph]
    together = np.array([[any({a, b} <= t for t in node_triples) for b in range(7)] for a in range(7)])
    np.testing.assert_array_equal(g.kind[:n_graph, :n_graph], np.where(together[np.ix_(nodes, nodes)], 0, 1))


def test_shared_entities_once_relations_once_per_triple(tok):
    g = encode_triples([("paris", "located in", "france"), ("france", "located in", "paris")], tok, conflict="nearest")
    assert g.input_ids.tolist() == [3000, 2284, 1999, 2605, 2284, 1999]
    assert g.node_of_token.tolist() == [0, 1, 1, 2, 3, 3]
    assert g.entity_of_node.tolist() == [0, -1, 1, -1]
    # The two relation occurrences share no triple.
    assert (g.kind[1:3, 4:6] == 1).all() and (g.kind[4:6, 1:3] == 1).all()
    # paris -> france is +3 in the first triple and -3 in the second: a tie, the earliest triple wins.
    assert g.relative_position[0, 3] == 3 and g.relative_position[3, 0] == -3
    # The second triple still reads france -> located in -> paris.
    assert g.relative_position[3, 4:6].tolist() == [1, 2]
    assert g.relative_position[4:6, 0].tolist() == [2, 1]


def test_conflicting_distances_take_the_smallest(tok):
    triples = [("paris", "is the capital city of", "france"), ("paris", "located in", "france")]
    g = encode_triples(triples, tok, conflict="nearest")
    # tokens: paris 0 | is the capital city of 1..5 | france 6 | located in 7, 8
    assert g.input_ids.tolist() == [3000, 2003, 1996, 3007, 2103, 1997, 2605, 2284, 1999]
    assert g.relative_position[0, 6] == 3  # first triple says 6, second 3
    assert g.relative_position[6, 0] == -3
    assert g.relative_position[1:6, 6].tolist() == [5, 4, 3, 2, 1]
    assert g.relative_position[0, 7:9].tolist() == [1, 2]
    assert g.relative_position[7:9, 6].tolist() == [2, 1]
    np.testing.assert_array_equal(g.relative_position, -g.relative_position.T)


def test_self_loop_keeps_within_node_positions(tok):
    g = encode_triples([("paris", "located in", "paris")], tok, conflict="nearest")
    assert g.input_ids.tolist() == [3000, 2284, 1999]
    # paris -> "located"/"in": as head +1/+2, as tail -2/-1: smallest |.| wins per token.
    assert g.relative_position[0].tolist() == [0, 1, -1]
    assert g.relative_position[:, 0].tolist() == [0, -1, 1]
    assert (g.kind == 0).all()


def test_layout_subgraph_matches_phrase_triples_and_keeps_isolated_seeds(tok, kg):
    index = kg([(0, 0, 1), (2, 1, 0), (1, 0, 2)], num_entities=4)
    sub = Subgraph(
        triples=np.array([2, 0], dtype=np.int64),
        hop=np.array([1, 1], dtype=np.int64),
        entities=np.array([0, 3, 1, 2], dtype=np.int64),
        seeds=np.array([0, 3], dtype=np.int64),
        truncated=False,
    )
    g = with_positions(layout_subgraph(index, sub, tok, question="who is the president"))
    ref = encode_triples([("e1", "r0", "e2"), ("e0", "r0", "e1")], tok, question="who is the president")
    # nodes: e1, r0, e2, e0, r0, then isolated seed e3
    assert g.entity_of_node.tolist() == [1, -1, 2, 0, -1, 3]
    n_ref = len(ref.input_ids)
    n_e3 = len(tok("e3", add_special_tokens=False)["input_ids"])
    n_graph_ref = ref.num_graph_tokens
    graph = np.arange(n_graph_ref)
    assert g.num_graph_tokens == n_graph_ref + n_e3
    np.testing.assert_array_equal(g.input_ids[:n_graph_ref], ref.input_ids[:n_graph_ref])
    np.testing.assert_array_equal(g.input_ids[n_graph_ref + n_e3 :], ref.input_ids[n_graph_ref:])
    np.testing.assert_array_equal(
        g.relative_position[np.ix_(graph, graph)], ref.relative_position[:n_graph_ref, :n_graph_ref]
    )
    e3 = np.arange(n_graph_ref, n_graph_ref + n_e3)
    assert (g.kind[np.ix_(e3, graph)] == 1).all() and (g.kind[np.ix_(e3, e3)] == 0).all()
    assert len(g.input_ids) == n_ref + n_e3


def first_triples(index, n: int) -> Subgraph:
    """The subgraph of ``index``'s first ``n`` triples in index order, the entities of all triples, no seeds."""
    entities = np.unique(index.triples[:, [0, 2]])
    return Subgraph(np.arange(n), np.ones(n, dtype=np.int64), entities, np.zeros(0, dtype=np.int64), False)


def test_empty_phrase_is_an_error(tok):
    with pytest.raises(ValueError, match="tokenises to no tokens"):
        encode_triples([("paris", "", "france")], tok)


@pytest.mark.parametrize("conflict", ["last", "nearest"])
def test_600_triples_are_consistent(tok, random_graph, conflict):
    index = random_graph(num_entities=300, num_triples=600, seed=1)
    sub = first_triples(index, 600)
    g = with_positions(layout_subgraph(index, sub, tok, question="who is the president"), conflict=conflict)
    n_graph = g.num_graph_tokens
    assert (g.node_of_token[:n_graph] >= 0).all() and (g.node_of_token[n_graph:] == -1).all()
    assert (g.entity_of_node == -1).sum() == 600
    assert sorted(g.entity_of_node[g.entity_of_node >= 0].tolist()) == sub.entities.tolist()
    antisymmetric = g.relative_position + g.relative_position.T
    if conflict == "last":  # the reference moves a self-loop's entity tokens off the diagonal, only those
        rows = index.triples[sub.triples]
        loops = set(rows[rows[:, 0] == rows[:, 2], 0].tolist())
        node_entity = np.append(g.entity_of_node, -1)[g.node_of_token]  # (L,) -1 off entity tokens
        looped = np.isin(node_entity, sorted(loops)) & (node_entity >= 0)
        np.testing.assert_array_equal(np.diag(g.relative_position) != 0, looped)
        np.fill_diagonal(antisymmetric, 0)
    assert not antisymmetric.any()
    np.testing.assert_array_equal(g.kind[:n_graph, :n_graph], g.kind[:n_graph, :n_graph].T)
    assert not g.relative_position[g.kind == 1].any()


@pytest.mark.parametrize("question", [None, "who is the president"])
def test_path_mode_reads_a_chain_as_its_text(tok, question):
    chain = [
        ("barack obama", "was born in", "honolulu"),
        ("honolulu", "is located in", "hawaii"),
        ("hawaii", "is a state of", "united states of america"),
    ]
    g = encode_triples(chain, tok, question=question, mode="path")
    n_graph = g.num_graph_tokens
    steps = np.arange(n_graph)
    np.testing.assert_array_equal(g.relative_position[:n_graph, :n_graph], steps[None, :] - steps[:, None])
    assert (g.kind[:n_graph, :n_graph] == 0).all()
    local = encode_triples(chain, tok, question=question, mode="triple")
    np.testing.assert_array_equal(g.kind[n_graph:], local.kind[n_graph:])  # question pairs do not depend on it


def test_path_mode_takes_shortest_directed_path_and_leaves_unreachable_pairs_global(tok):
    # paris -> france <- europe: paris and europe are joined by no directed path.
    g = encode_triples([("paris", "capital of", "france"), ("europe", "located in", "france")], tok, mode="path")
    # tokens: paris 0 | capital of 1, 2 | france 3 | europe 4 | located in 5, 6
    assert g.relative_position[0, 3] == 3 and g.relative_position[4, 3] == 3
    assert g.kind[0, 4] == 1 and g.kind[4, 0] == 1 and g.relative_position[0, 4] == 0
    assert g.kind[1, 5] == 1  # the two relations: no directed path either way
    np.testing.assert_array_equal(g.relative_position, -g.relative_position.T)


def test_path_mode_agrees_with_triple_mode_within_triples_of_a_tree(tok, random_graph):
    index = random_graph(num_entities=60, num_triples=59, seed=3)
    sub = first_triples(index, 59)
    triple = with_positions(layout_subgraph(index, sub, tok), mode="triple")
    path = with_positions(layout_subgraph(index, sub, tok), mode="path")
    joined = triple.kind == 0
    assert (path.kind[joined] == 0).all()  # every triple pair is also joined by a path
    np.testing.assert_array_equal(
        np.abs(path.relative_position[joined]) <= np.abs(triple.relative_position[joined]), True
    )
    np.testing.assert_array_equal(path.relative_position, -path.relative_position.T)


def test_linearised_subgraph_repeats_entities_and_reads_as_text(tok, kg):
    index = kg([(0, 0, 1), (1, 0, 2)], num_entities=4)
    sub = Subgraph(
        triples=np.array([0, 1], dtype=np.int64),
        hop=np.ones(2, dtype=np.int64),
        entities=np.array([0, 3, 1, 2], dtype=np.int64),
        seeds=np.array([0, 3], dtype=np.int64),
        truncated=False,
    )
    layout = linearise_subgraph(index, sub, tok, question="who is the president")
    texts = ["e0", "r0", "e1", "e1", "r0", "e2", "e3", "who is the president"]
    expected = [t for text in texts for t in tok(text, add_special_tokens=False)["input_ids"]]
    assert layout.input_ids.tolist() == expected
    assert layout.linear and layout.entity_of_node.tolist() == [0, 1, 2, 3]
    pieces = [len(tok(text, add_special_tokens=False)["input_ids"]) for text in texts]
    owners = [0, -1, 1, 1, -1, 2, 3, -1]
    assert layout.node_of_token.tolist() == [o for o, n in zip(owners, pieces, strict=True) for _ in range(n)]
    position, kind = graph_positions(layout)
    steps = np.arange(len(expected))
    np.testing.assert_array_equal(position, steps[None, :] - steps[:, None])
    assert (kind == 4).all()
