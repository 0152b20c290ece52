"""GNNRetrieverModule with a prior (glmrag/nn/prior.py): untrained, it ranks exactly as PPR; training moves it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stand_ins import HashEncoder, link_questions

from glmrag.datamodules.kg_source import StaticKGs
from glmrag.index.ranking import rank_passages
from glmrag.models.gnn_module import GNNRetrieverModule, question_subgraphs, subgraph_batch
from glmrag.models.losses import gfm_rag_loss
from glmrag.nn.graph_inputs import graph_inputs, seed_weights
from glmrag.retrievers.ppr import PPRRetriever

TINY = {"hidden_channels": 16, "num_layers": 2, "question_dim": 16, "relation_dim": 16, "node_dim": 16}


def _setup(random_graph, seed_sets, **module):
    index = random_graph(150, 300, seed=3)
    questions = link_questions(index, seed_sets)
    graph = graph_inputs(index, HashEncoder(16), node_features=False)
    torch.manual_seed(0)
    model = GNNRetrieverModule(
        gnn=TINY,
        prior={"kind": "ppr"},
        evaluation={"ranker": "softmax_sum"},
        kgs=StaticKGs({"toy": index}, {"toy": graph}),
        **module,
    )
    query = torch.from_numpy(HashEncoder(16).encode([q.question for q in questions]))  # (B, 16)
    seeds = seed_weights(index, [q.id for q in questions])  # (B, E)
    return index, questions, model, graph, query, seeds


SEED_SETS = [[0], [3, 17], [42], [7, 8, 9], []]


def test_untrained_model_ranks_passages_as_ppr(random_graph):
    index, questions, model, graph, query, seeds = _setup(random_graph, SEED_SETS)
    with torch.no_grad():
        logits = model(graph, query, seeds).numpy()  # (B, E)
    got, _ = rank_passages(logits, index, 10, method="softmax_sum")
    ppr = PPRRetriever().retrieve(questions, index, None, top_k=10)
    for b, ranking in enumerate(ppr):
        assert [index.passage_ids[p] for p in got[b]] == ranking.passage_ids
    # and every entity's softmax probability is its PPR probability
    probs = torch.softmax(torch.from_numpy(logits), dim=1).numpy()
    assert np.allclose(probs, PPRRetriever().entity_scores(questions, index), atol=1e-6)


def test_a_training_step_moves_the_correction_and_the_weight(random_graph):
    index, questions, model, graph, query, seeds = _setup(random_graph, SEED_SETS[:4])
    target = torch.zeros_like(seeds)
    target[:, 100:110] = 1.0  # entities the prior does not favour
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = model(graph, query, seeds).detach()
    for _ in range(3):
        loss = gfm_rag_loss(model(graph, query, seeds), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = model(graph, query, seeds).detach()
    assert model.prior.weight.item() != 1.0
    assert model.gnn.readout[-1].weight.abs().sum() > 0  # the zero-initialised last layer learned
    assert (after[:, 100:110] - before[:, 100:110]).mean() > 0  # the targets rose


def test_restricted_subgraphs_keep_the_prior_outside(random_graph):
    from glmrag.datamodules.glm_inputs import SubgraphSettings

    settings = {"max_triplets": 20, "max_hops": 2, "seed": 0}
    index, questions, model, graph, query, seeds = _setup(random_graph, SEED_SETS[:4], subgraph=settings)
    ids = [q.id for q in questions]
    subgraphs = subgraph_batch(index, question_subgraphs(index, ids, SubgraphSettings(**settings)))
    with torch.no_grad():
        model.gnn.readout[-1].bias.fill_(1.0)  # a nonzero correction
        logits = model(graph, query, seeds, subgraphs)  # (B, E)
        prior = model.prior(graph, seeds)
    inside = subgraphs.entity_mask(graph.num_nodes)  # (B, E)
    assert torch.isfinite(logits).all()
    assert torch.equal(logits[~inside], prior[~inside])
    assert not torch.allclose(logits[inside], prior[inside])


def test_checkpoint_hparams_carry_the_prior(random_graph):
    model = _setup(random_graph, SEED_SETS[:1])[2]
    expected = {"kind": "ppr", "damping": 0.5, "tol": 1e-6, "learn_weight": True, "dense_weight": None}
    assert model.hparams.prior == expected
    with pytest.raises(TypeError, match="model.prior"):
        GNNRetrieverModule(gnn=TINY, prior={"kind": "ppr", "alpha": 0.5})


def test_passage_list_ce_scores_the_softmax_sum_ranking(random_graph):
    from glmrag.models.losses import passage_list_ce
    from glmrag.nn.prior import MASS_FLOOR, passage_entity_matrix, passage_logits

    index = random_graph(40, 60, seed=2)
    matrix = passage_entity_matrix(index)  # (P, E)
    dense = torch.from_numpy(index.passage_entities.toarray()).float()  # (P, E)
    torch.manual_seed(0)
    logits = torch.randn(3, index.num_entities, requires_grad=True)
    gold = torch.zeros(3, index.num_passages, dtype=torch.bool)
    gold[0, [1, 4]] = True
    gold[1, 2] = True  # row 2: no gold, left out of the mean
    scores = torch.softmax(logits, -1) @ dense.t()  # (B, P): the softmax_sum ranker's scores
    assert torch.allclose(passage_logits(logits, matrix), torch.log(scores + MASS_FLOOR), atol=1e-6)
    loss = passage_list_ce(passage_logits(logits, matrix), gold)
    share = (scores + MASS_FLOOR) / (scores + MASS_FLOOR).sum(-1, keepdim=True)
    expected = (-(share[0, 1].log() + share[0, 4].log()) / 2 - share[1, 2].log()) / 2
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    loss.backward()
    assert logits.grad[2].abs().sum() == 0 and logits.grad[0].abs().sum() > 0
    # the dense term adds b cos(q, p)
    q, p = (
        torch.nn.functional.normalize(torch.randn(3, 8), dim=1),
        torch.nn.functional.normalize(torch.randn(index.num_passages, 8), dim=1),
    )
    fused = passage_logits(logits, matrix, torch.tensor(10.0), q, p)
    assert torch.allclose(fused, passage_logits(logits, matrix) + 10.0 * q @ p.t(), atol=1e-5)
    with pytest.raises(ValueError, match="question_emb and passage_emb"):
        passage_logits(logits, matrix, torch.tensor(10.0))


def test_the_passage_weight_adds_the_passage_list_ce_to_the_step_loss(random_graph):
    from glmrag.models.losses import passage_list_ce
    from glmrag.nn.prior import passage_entity_matrix, passage_logits

    losses = {}
    for weight in (0.0, 2.0):
        index, questions, model, graph, query, seeds = _setup(
            random_graph, SEED_SETS[:3], loss={"passage_weight": weight}
        )
        target = torch.zeros_like(seeds)
        target[:, :5] = 1.0
        gold = [[index.passage_ids[0]], [index.passage_ids[1], index.passage_ids[2]], [index.passage_ids[3]]]
        batch = {
            "kg": "toy",
            "question_ids": [q.id for q in questions],
            "question_emb": query,
            "seed_weight": seeds,
            "target": target,
            "gold": gold,
            "real": torch.ones(3, dtype=torch.bool),
        }
        losses[weight], logits = model.model_step(batch)
    gold_mask = torch.zeros(3, index.num_passages, dtype=torch.bool)
    gold_mask[0, 0] = gold_mask[1, 1] = gold_mask[1, 2] = gold_mask[2, 3] = True
    expected = passage_list_ce(passage_logits(logits, passage_entity_matrix(index)), gold_mask)
    assert losses[2.0].item() == pytest.approx(losses[0.0].item() + 2.0 * expected.item(), rel=1e-5)
