"""The PPR prior in torch against the PPR retriever (itself checked against networkx.pagerank)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stand_ins import link_questions

from glmrag.nn.graph_inputs import seed_weights
from glmrag.nn.prior import LOG_FLOOR, EntityPrior, PriorRows, PriorSettings, ppr_probabilities, walk_of
from glmrag.retrievers.ppr import PPRRetriever


def _questions(index, seed_sets):
    return link_questions(index, seed_sets)


@pytest.mark.parametrize("graph_seed", range(3))
def test_ppr_probabilities_equal_the_ppr_retriever(random_graph, make_graph, graph_seed):
    index = random_graph(120, 200, seed=graph_seed)  # hubs, parallel triples, self-loops, isolated entities
    assert (index.triples[:, 0] == index.triples[:, 2]).any()
    rng = np.random.default_rng(graph_seed)
    seed_sets = [rng.choice(index.num_entities, rng.integers(1, 5), replace=False).tolist() for _ in range(5)]
    seed_sets.append([])  # no linked entity: uniform restart, the retriever's global-PageRank fallback
    questions = _questions(index, seed_sets)
    settings = PriorSettings(tol=1e-10)
    expected = PPRRetriever(tol=1e-13, dtype="float64").entity_scores(questions, index)  # (B, E)
    seeds = seed_weights(index, [q.id for q in questions])  # (B, E)
    got = ppr_probabilities(walk_of(make_graph(index)), seeds, settings.damping, settings.iterations)
    assert got.shape == expected.shape
    assert np.allclose(got.numpy(), expected, atol=1e-6)
    assert torch.allclose(got.sum(1), torch.ones(len(questions)), atol=1e-5)


def test_entity_prior_is_the_weighted_log_probability(random_graph, make_graph):
    index = random_graph(60, 40, seed=1)
    questions = _questions(index, [[0], [5, 7]])
    graph, seeds = make_graph(index), seed_weights(index, [q.id for q in questions])
    prior = EntityPrior(PriorSettings())
    p = ppr_probabilities(walk_of(graph), seeds, 0.5, PriorSettings().iterations)
    logits = prior(graph, seeds)
    assert torch.allclose(logits, p.clamp_min(LOG_FLOOR).log())
    assert torch.isfinite(logits).all()
    (logits.sum()).backward()
    assert prior.weight.grad is not None and prior.weight.grad != 0  # the weight learns; the walk has no gradient
    frozen = EntityPrior(PriorSettings(learn_weight=False))
    assert not frozen.weight.requires_grad


@pytest.mark.parametrize(
    ("field", "value"), [("kind", "dense"), ("damping", 1.0), ("tol", 0.0), ("learn_weight", "yes")]
)
def test_bad_prior_settings_are_named(field, value):
    with pytest.raises(ValueError, match=f"prior.{field}"):
        PriorSettings(**{field: value})


def test_each_question_is_walked_once_whatever_batch_brings_it(random_graph, make_graph):
    index = random_graph(80, 120, seed=2)
    questions = _questions(index, [[0], [5, 7], [3], []])
    graph, seeds = make_graph(index), seed_weights(index, [q.id for q in questions])  # (4, E)
    prior = EntityPrior(PriorSettings())
    uncached = prior.log_prior(walk_of(graph), seeds)  # (4, E)
    first = prior(graph, seeds[[0, 1]])
    assert prior.cache.computed == 2
    mixed = prior(graph, seeds[[3, 1, 0, 2, 1]])  # two new rows, three seen, one twice
    assert prior.cache.computed == 4
    assert torch.equal(first.detach(), uncached[[0, 1]])
    assert torch.equal(mixed.detach(), uncached[[3, 1, 0, 2, 1]])
    mixed.sum().backward()
    assert prior.weight.grad is not None and prior.weight.grad != 0  # cached rows still carry the weight's gradient
    edited = seeds[[2]].clone()
    edited[0, 9] = 0.5  # another seed set: walked anew
    assert torch.equal(prior(graph, edited).detach(), prior.log_prior(walk_of(graph), edited))
    assert prior.cache.computed == 5
    other = make_graph(random_graph(80, 120, seed=3))  # the same seeds on another KG
    assert torch.equal(prior(other, seeds[[0]]).detach(), prior.log_prior(walk_of(other), seeds[[0]]))
    assert prior.cache.computed == 6


def test_prior_rows_keep_at_most_their_budget():
    walk, seeds = object.__new__(type("W", (), {})), torch.eye(4)  # any weak-referenceable key
    calls = []

    def compute(_walk, rows):
        calls.append(len(rows))
        return rows * 2

    cache = PriorRows(max_mib=2 * 16 / 2**20)  # two rows of four float32
    assert torch.equal(cache(walk, seeds[:3], compute), seeds[:3] * 2)
    assert cache.nbytes == 32 and len(cache.rows) == 2  # the oldest row went
    cache(walk, seeds[1:3], compute)
    cache(walk, seeds[:1], compute)
    assert calls == [3, 1]
