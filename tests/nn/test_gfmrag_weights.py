"""A GFM-RAG-layout state dict in glmrag's QueryGNN computes GFM-RAG's entity scores (issue 35, item 5).

The reference below is written from GFM-RAG's equations (github.com/RManLuo/gfm-rag, read at HEAD 57e3e28), not
imported: ``GNNRetriever.forward`` and ``QueryGNN.forward`` (``gfmrag/models/gfm_rag_v1/model.py``),
``QueryNBFNet.bellmanford`` (``gfmrag/models/ultra/models.py``), ``GeneralizedRelationalConv`` (``.../ultra/
layers.py``) and the C++ ``rspmm`` it sums with (``.../ultra/rspmm/source/rspmm.cpp``). It uses the upstream's
parameter names and edge layout and materialises every message.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from glmrag.index.kg import KGIndex
from glmrag.nn.gfmrag_weights import from_gfmrag_state_dict, gfmrag_gnn_config, gfmrag_graph
from glmrag.nn.gnn import QueryGNN
from glmrag.nn.graph_inputs import GraphInputs

HIDDEN, FEAT, LAYERS = 4, 3, 3
NUM_NODES, NUM_RELATIONS = 5, 3
TRIPLES = [(0, 0, 1), (1, 1, 2), (2, 2, 3), (3, 0, 4), (0, 1, 3), (4, 2, 2), (1, 0, 4)]
"""(head, relation, tail): a directed graph on 5 entities, 3 relations; GFM-RAG adds the inverses (r + 3)."""


def upstream_edges() -> tuple[torch.Tensor, torch.Tensor]:
    """GFM-RAG's edge layout (``GraphIndexDatasetV1.process``): the triples' ``[head; tail]`` columns, then the
    same columns flipped, with types ``r`` then ``r + R``. glmrag's ``graph_inputs`` builds the same tensors.

    Shapes: -> ``edge_index`` (2, 2T), ``edge_type`` (2T,).
    """
    head, rel, tail = torch.tensor(TRIPLES).t()
    target = torch.stack([head, tail])  # (2, T)
    return torch.cat([target, target.flip(0)], 1), torch.cat([rel, rel + NUM_RELATIONS])


def upstream_state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random float64 tensors under GFM-RAG ``GNNRetriever``'s names and shapes (``input_dim`` = every
    ``hidden_dims`` = H, ``feat_dim`` = F, ``project_relations=True``, ``layer_norm: yes``, 2-layer ``mlp``)."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int, scale: float = 0.6) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    state = {
        "question_mlp.weight": rand(HIDDEN, FEAT),
        "question_mlp.bias": rand(HIDDEN),
        "rel_mlp.weight": rand(HIDDEN, FEAT),
        "rel_mlp.bias": rand(HIDDEN),
    }
    for i in range(LAYERS):
        layer = f"entity_model.layers.{i}."
        state |= {
            layer + "linear.weight": rand(HIDDEN, 2 * HIDDEN),
            layer + "linear.bias": rand(HIDDEN),
            layer + "layer_norm.weight": 1 + rand(HIDDEN, scale=0.3),
            layer + "layer_norm.bias": rand(HIDDEN, scale=0.3),
            layer + "relation_projection.0.weight": rand(HIDDEN, HIDDEN),
            layer + "relation_projection.0.bias": rand(HIDDEN),
            layer + "relation_projection.2.weight": rand(HIDDEN, HIDDEN),
            layer + "relation_projection.2.bias": rand(HIDDEN),
        }
    state |= {
        "entity_model.mlp.0.weight": rand(2 * HIDDEN, 2 * HIDDEN),
        "entity_model.mlp.0.bias": rand(2 * HIDDEN),
        "entity_model.mlp.2.weight": rand(1, 2 * HIDDEN),
        "entity_model.mlp.2.bias": rand(1),
    }
    return state


def linear(p: dict[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    return x @ p[name + ".weight"].t() + p[name + ".bias"]


def upstream_scores(
    p: dict[str, torch.Tensor],
    query: torch.Tensor,
    boundary: torch.Tensor,
    rel_attr: torch.Tensor,
    edge_index: torch.Tensor,
    edge_type: torch.Tensor,
) -> torch.Tensor:
    """GFM-RAG's ``QueryNBFNet`` (``short_cut``, ``layer_norm``, DistMult, sum, ``concat_hidden`` off) from its
    equations, messages materialised, summed where the C++ ``rspmm`` sums them: into ``edge_index[0]``.

    Per layer i: ``rel_i = relation_projection(rel_mlp(rel_attr))``; for every edge c,
    ``m_c = h[edge_index[1, c]] * rel_i[edge_type[c]]``; ``a_v = boundary_v + sum_{c: edge_index[0, c] = v} m_c``;
    ``h <- h + relu(layer_norm(linear([h, a])))``. Score ``mlp([h_L, query])``.

    Shapes: **query** (B, H), **boundary** (B, N, H), **rel_attr** (2R, F), **edge_index** (2, 2T) -> (B, N).
    """
    relation = linear(p, "rel_mlp", rel_attr)  # (2R, H)
    row, col = edge_index  # the rspmm's output rows and gathered columns
    h = boundary
    for i in range(LAYERS):
        layer = f"entity_model.layers.{i}."
        rel_i = linear(p, layer + "relation_projection.2", F.relu(linear(p, layer + "relation_projection.0", relation)))
        messages = h[:, col] * rel_i[edge_type]  # (B, 2T, H)
        aggregate = boundary.index_add(1, row, messages)  # (B, N, H)
        pre = linear(p, layer + "linear", torch.cat([h, aggregate], -1))  # (B, N, H)
        norm = F.layer_norm(pre, (HIDDEN,), p[layer + "layer_norm.weight"], p[layer + "layer_norm.bias"])
        h = h + F.relu(norm)  # short_cut
    features = torch.cat([h, query.unsqueeze(1).expand_as(h)], -1)  # (B, N, 2H)
    return linear(p, "entity_model.mlp.2", F.relu(linear(p, "entity_model.mlp.0", features))).squeeze(-1)


def upstream_retriever(p, question_emb, start_mask, entity_doc_count, rel_attr, edge_index, edge_type):
    """GFM-RAG ``GNNRetriever.forward`` up to the entity scores (before ``map_entities_to_docs``):
    ``q = question_mlp(e)``, seeds weighted ``1 / |documents of the entity|`` (0 for none,
    ``get_entities_weight``), ``boundary = (mask * weight) ⊗ q``.

    Shapes: **question_emb** (B, F), **start_mask** (B, N), **entity_doc_count** (N,) -> (B, N) and the seed
    weights (B, N).
    """
    weight = torch.where(entity_doc_count > 0, 1 / entity_doc_count, torch.zeros_like(entity_doc_count))  # (N,)
    seed = start_mask * weight  # (B, N)
    query = linear(p, "question_mlp", question_emb)  # (B, H)
    boundary = seed.unsqueeze(-1) * query.unsqueeze(1)  # (B, N, H)
    return upstream_scores(p, query, boundary, rel_attr, edge_index, edge_type), seed


def inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, GraphInputs]:
    """Two questions, their seed masks, the entities' document counts and the graph glmrag builds for the KG."""
    g = torch.Generator().manual_seed(seed)
    question = torch.randn(2, FEAT, generator=g, dtype=torch.float64)
    start_mask = torch.tensor([[1, 0, 0, 1, 0], [0, 0, 1, 0, 1]], dtype=torch.float64)
    doc_count = torch.tensor([2.0, 1.0, 1.0, 3.0, 0.0], dtype=torch.float64)
    edge_index, edge_type = upstream_edges()
    graph = GraphInputs(
        edge_index=edge_index,
        edge_type=edge_type,
        relation_features=torch.randn(2 * NUM_RELATIONS, FEAT, generator=g, dtype=torch.float64),
        node_features=None,
        entity_passage_count=doc_count,
        num_nodes=NUM_NODES,
    )
    return question, start_mask, doc_count, graph


def glmrag_model(state: dict[str, torch.Tensor], aggregation: str) -> QueryGNN:
    model = QueryGNN(gfmrag_gnn_config(state, aggregation=aggregation)).double().eval()
    model.load_state_dict(from_gfmrag_state_dict(state), strict=True)
    return model


def test_glmrag_builds_gfmrag_edge_layout(make_graph):
    """glmrag's graph_inputs lays the edges out as GFM-RAG does, so the only remap is the direction."""
    index = KGIndex(
        entities=[f"e{i}" for i in range(NUM_NODES)],
        relations=["r0", "r1", "r2"],
        triples=np.array(TRIPLES),
        passage_ids=["p0"],
        entity_passages=sp.csr_matrix(np.ones((NUM_NODES, 1))),
    )
    graph = make_graph(index)
    edge_index, edge_type = upstream_edges()
    assert torch.equal(graph.edge_index, edge_index) and torch.equal(graph.edge_type, edge_type)
    assert graph.relation_features.shape[0] == 2 * NUM_RELATIONS


@pytest.mark.parametrize("aggregation", ["fused", "materialized"])
def test_retriever_scores_equal_gfmrag(aggregation):
    state = upstream_state_dict()
    question, start_mask, doc_count, graph = inputs()
    edge_index, edge_type = upstream_edges()
    want, seed_weight = upstream_retriever(
        state, question, start_mask, doc_count, graph.relation_features, edge_index, edge_type
    )
    model = glmrag_model(state, aggregation)
    with torch.no_grad():
        got = model(gfmrag_graph(graph), question, seed_weight)
        unflipped = model(graph, question, seed_weight)
    assert got.shape == (2, NUM_NODES) and got.dtype == torch.float64
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    # The direction is what the remap buys: glmrag's own direction gives other scores on this graph.
    assert (unflipped - want).abs().max() > 1e-3


def test_flipping_the_edges_equals_swapping_each_relation_with_its_inverse():
    """gfmrag_graph's docstring: reversing every edge is the unflipped graph with the relation-feature halves
    swapped (glmrag stores each triple both ways)."""
    state = upstream_state_dict(seed=2)
    question, start_mask, _, graph = inputs(seed=3)
    features = graph.relation_features
    swapped = GraphInputs(
        edge_index=graph.edge_index,
        edge_type=graph.edge_type,
        relation_features=torch.cat([features[NUM_RELATIONS:], features[:NUM_RELATIONS]]),
        node_features=None,
        entity_passage_count=graph.entity_passage_count,
        num_nodes=NUM_NODES,
    )
    model = glmrag_model(state, "fused")
    with torch.no_grad():
        torch.testing.assert_close(
            model(gfmrag_graph(graph), question, start_mask), model(swapped, question, start_mask), atol=1e-12, rtol=0
        )


@pytest.mark.parametrize("head, relation", [(0, 1), (2, 4)])
def test_kg_completion_scores_equal_gfmrag(head, relation):
    """GFM-RAG's KG-completion model on the same weights, for ``(head, relation, ?)`` after
    ``negative_sample_to_tail`` (relation in [0, 2R)), on the graph left after ``remove_easy_edges``
    (here: the whole graph). Upstream HEAD (``gfm_rag_v1.QueryGNN.forward``) queries with
    ``question_mlp(rel_attr[r])``: glmrag's ``score`` with ``question_proj`` gives it. The 2024 release
    (``gfmrag/models.py``, ``EntityNBFNet.bellmanford``) queried with ``rel_mlp(rel_attr)[r]``: that is glmrag's
    ``kgc_forward``."""
    state = upstream_state_dict(seed=4)
    _, _, _, graph = inputs(seed=5)
    edge_index, edge_type = upstream_edges()
    rel_attr = graph.relation_features
    one_hot = F.one_hot(torch.tensor([head]), NUM_NODES).double()  # (1, N)
    model = glmrag_model(state, "fused")
    flipped = gfmrag_graph(graph)

    def reference(query: torch.Tensor) -> torch.Tensor:  # (1, H) -> (1, N); the head is the only seed
        return upstream_scores(
            state, query, one_hot.unsqueeze(-1) * query.unsqueeze(1), rel_attr, edge_index, edge_type
        )

    with torch.no_grad():
        got = model.score(flipped, model.question_proj(rel_attr[[relation]]), one_hot)
        torch.testing.assert_close(
            got, reference(linear(state, "question_mlp", rel_attr[[relation]])), atol=1e-10, rtol=1e-10
        )
        got = model.kgc_forward(flipped, torch.tensor([head]), torch.tensor([relation]))
        torch.testing.assert_close(
            got, reference(linear(state, "rel_mlp", rel_attr)[[relation]]), atol=1e-10, rtol=1e-10
        )


def test_model_pth_layout_and_settings_are_accepted():
    state = upstream_state_dict()
    released = {  # config.json["model_config"]["entity_model"] of GFM-RAG's sft_training.yaml
        "_target_": "gfmrag.models.ultra.models.QueryNBFNet",
        "input_dim": HIDDEN,
        "hidden_dims": [HIDDEN] * LAYERS,
        "message_func": "distmult",
        "aggregate_func": "sum",
        "short_cut": True,
        "layer_norm": True,
    }
    converted = from_gfmrag_state_dict({"model": state}, released)
    assert converted.keys() == QueryGNN(gfmrag_gnn_config(state)).state_dict().keys()
    assert converted["convs.2.norm.weight"] is state["entity_model.layers.2.layer_norm.weight"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.pop("entity_model.layers.1.layer_norm.weight"), "entity_model.layers.1.layer_norm.weight"),
        (
            lambda s: s.update({"entity_model.layers.0.linear.weight": torch.zeros(HIDDEN, 13 * HIDDEN)}),
            "entity_model.layers.0.linear.weight",
        ),
        (
            lambda s: s.update({"entity_model.layers.0.relation_linear.weight": torch.zeros(3 * HIDDEN, HIDDEN)}),
            "entity_model.layers.0.relation_linear.weight",
        ),
        (lambda s: s.update({"entity_model.layers.2.relation.weight": torch.zeros(6, HIDDEN)}), "project_relations"),
        (lambda s: s.update({"entity_model.mlp.4.weight": torch.zeros(1, 2 * HIDDEN)}), "entity_model.mlp.4.weight"),
        (
            lambda s: s.update({"entity_model.mlp.0.weight": torch.zeros(2 * HIDDEN, 4 * HIDDEN)}),
            "concat_hidden",
        ),
        (lambda s: s.pop("question_mlp.weight"), "question_mlp.weight"),
    ],
)
def test_an_unmappable_state_dict_names_its_key(edit, message):
    state = upstream_state_dict()
    edit(state)
    with pytest.raises(ValueError, match=message):
        from_gfmrag_state_dict(state)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"aggregate_func": "pna", "short_cut": True, "layer_norm": True}, "aggregate_func"),
        ({"message_func": "transe", "short_cut": True, "layer_norm": True}, "message_func"),
        ({"layer_norm": True}, "short_cut"),  # upstream default: no residual
        ({"short_cut": True, "layer_norm": True, "concat_hidden": True}, "concat_hidden"),
        ({"short_cut": True, "layer_norm": True, "input_dim": 4, "hidden_dims": [4, 8]}, "hidden_dims"),
    ],
)
def test_unimplemented_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        from_gfmrag_state_dict(upstream_state_dict(), settings)
