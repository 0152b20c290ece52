"""A GFM-RAG checkpoint folder scores in glmrag as GFM-RAG's own code scores it (issue 51, item 2).

The state dict is generated here (:func:`gfmrag_folders.seeded_state_dict`, seed 0) in GFM-RAG's layout; the
expected scores are GFM-RAG's, from the same weights, KG and features, computed by its ``GNNRetriever`` in
float64 with::

    PYTHONPATH=$PWD python benchmarks/gfmrag_side_by_side.py --peer <gfm-rag checkout> \\
        --out benchmarks/results/gfmrag_side_by_side.json

(the ``reference`` block of the JSON; ``tests/gfmrag_folders.py`` holds the numbers and how they were drawn).
"""

from __future__ import annotations

import torch
from gfmrag_folders import FEAT, GFMRAG_SCORES, ReferenceEncoder, reference_index, seeded_features, write_folder
from stand_ins import HashEncoder

from glmrag.models.gfmrag_folder import read_gfmrag_folder
from glmrag.nn.gfmrag_weights import gfmrag_graph_inputs, gfmrag_relation_texts
from glmrag.nn.gnn import QueryGNN
from glmrag.nn.graph_inputs import graph_inputs, seed_weights


def scores(folder, graph) -> torch.Tensor:
    """glmrag's float64 entity scores of the reference questions, from the folder's weights, on ``graph``."""
    checkpoint = read_gfmrag_folder(folder)
    model = QueryGNN(checkpoint.gnn).double().eval()
    model.load_state_dict(checkpoint.state_dict)
    index = reference_index()
    graph.relation_features = graph.relation_features.double()
    _, question = seeded_features()
    with torch.no_grad():
        return model(graph, question, seed_weights(index, ["q0", "q1"]).double())  # (B, N)


def test_entity_scores_equal_gfmrags(tmp_path):
    """The folder read, its weights converted, GFM-RAG's graph built (flipped edges, ``inverse_<r>`` texts) and
    its seeds weighted 1 / |passages|: GFM-RAG's numbers."""
    folder = write_folder(tmp_path / "gfmrag")
    got = scores(folder, gfmrag_graph_inputs(reference_index(), ReferenceEncoder()))
    torch.testing.assert_close(got, torch.tensor(GFMRAG_SCORES, dtype=torch.float64), atol=1e-10, rtol=0)


def test_glmrags_own_graph_gives_other_scores(tmp_path):
    """The graph is what the remap buys: glmrag's own layout (its edge direction, its relation features in the
    same rows) scores otherwise, so the equality above is not vacuous."""
    folder = write_folder(tmp_path / "gfmrag")
    own = graph_inputs(reference_index(), HashEncoder(FEAT), node_features=False)
    own.relation_features = seeded_features()[0]
    assert (scores(folder, own) - torch.tensor(GFMRAG_SCORES, dtype=torch.float64)).abs().max() > 1e-2


def test_relation_texts_are_gfmrags():
    """GFM-RAG embeds ``inverse_<name>`` (``GraphIndexDatasetV1.process_graph``), not glmrag's ``inverse <name>``."""
    assert gfmrag_relation_texts(reference_index())[4:] == ["inverse_born in", "inverse_capital of",
                                                           "inverse_member of", "inverse_directed"]  # fmt: skip
