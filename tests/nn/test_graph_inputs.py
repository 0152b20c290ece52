"""graph_inputs and seed_weights on a tiny KG index, with the real offline MiniLM embedder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from glmrag.index.embed import Embedder
from glmrag.nn.graph_inputs import GraphInputs, graph_inputs, relation_texts, seed_weights


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The offline MiniLM embedder, loaded once per module."""
    return Embedder()


@pytest.fixture
def tiny(kg):
    # "born in": 0 -> 1; "capital of": 1 -> 2 and 3 -> 2. Entity 1 is in 3 passages, entity 0 in 1, entity 3 in none.
    index = kg(
        [[0, 0, 1], [1, 1, 2], [3, 1, 2]],
        4,
        passages=[[0, 1], [1, 2], [1]],
        links={"q1": [0, 1], "q2": [3], "q3": []},
    )
    index.relations = ["born in", "capital of"]
    return index


def test_edges_and_types(tiny, hash_encoder):
    graph = graph_inputs(tiny, hash_encoder)
    assert graph.edge_index.tolist() == [[0, 1, 3, 1, 2, 2], [1, 2, 2, 0, 1, 3]]
    assert graph.edge_type.tolist() == [0, 1, 1, 2, 3, 3]
    assert graph.num_nodes == 4 and graph.num_relations == 2 and graph.num_edges == 6
    # the edge types agree with KGIndex.adjacency
    adj = tiny.adjacency
    for u in range(4):
        s = adj.edges_of(u)
        pairs = set(zip(adj.neighbor[s].tolist(), adj.edge_type[s].tolist(), strict=True))
        mine = graph.edge_index[0] == u
        assert pairs == set(zip(graph.edge_index[1, mine].tolist(), graph.edge_type[mine].tolist(), strict=True))
    names = ["born in", "capital of", "inverse_born in", "inverse_capital of"]
    assert [tiny.relation_name(t) for t in range(4)] == names
    assert graph.entity_passage_count.tolist() == [1.0, 3.0, 1.0, 0.0]


def test_relation_features_embed_the_inverse_names(tiny, embedder):
    graph = graph_inputs(tiny, embedder)
    assert relation_texts(tiny) == ["born in", "capital of", "inverse born in", "inverse capital of"]
    assert graph.relation_features.shape == (4, 384) and graph.relation_features.dtype == torch.float32
    expected = embedder.encode(["born in", "capital of", "inverse born in", "inverse capital of"])
    np.testing.assert_allclose(graph.relation_features.numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(graph.relation_features.norm(dim=1).numpy(), 1.0, atol=1e-5)
    # an inverse name is near its relation, yet not the same vector
    cos = graph.relation_features @ graph.relation_features.T
    assert cos[0, 2] > cos[0, 1] and cos[0, 2] < 0.999
    assert graph.node_features is None  # the index has no entity embeddings


def test_node_features_from_entity_embeddings(tiny, hash_encoder):
    tiny.entity_embeddings = np.arange(4 * 3, dtype=np.float32).reshape(4, 3)
    graph = graph_inputs(tiny, hash_encoder)
    assert graph.node_features.tolist() == tiny.entity_embeddings.tolist()
    assert graph_inputs(tiny, hash_encoder, node_features=False).node_features is None


def test_seed_weights_are_inverse_passage_counts(tiny):
    w = seed_weights(tiny, ["q1", "q2", "q3", "unknown"])
    assert w.shape == (4, 4) and w.dtype == torch.float32
    expected = [[1.0, 1 / 3, 0, 0], [0, 0, 0, 1.0], [0, 0, 0, 0], [0, 0, 0, 0]]  # entity 3: no passage, weight 1
    torch.testing.assert_close(w, torch.tensor(expected))


def test_to_moves_every_tensor(tiny, hash_encoder):
    tiny.entity_embeddings = np.ones((4, 3), dtype=np.float32)
    graph = graph_inputs(tiny, hash_encoder).to("meta")
    tensors = [graph.edge_index, graph.edge_type, graph.relation_features, graph.node_features]
    assert all(t.device.type == "meta" for t in tensors + [graph.entity_passage_count])
    assert graph.num_nodes == 4


def test_inconsistent_inputs_are_refused():
    with pytest.raises(ValueError, match="2R"):
        GraphInputs(
            torch.zeros(2, 0, dtype=torch.long),
            torch.zeros(0, dtype=torch.long),
            torch.zeros(3, 4),
            None,
            torch.zeros(2),
            2,
        )
    with pytest.raises(ValueError, match="edge_type"):
        GraphInputs(
            torch.zeros(2, 1, dtype=torch.long),
            torch.zeros(2, dtype=torch.long),
            torch.zeros(2, 4),
            None,
            torch.zeros(2),
            2,
        )
