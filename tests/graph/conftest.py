"""Small KG indexes built directly from triples, for the graph tests."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from glmrag.index.kg import EntityLink, KGIndex


def build_kg(
    triples,
    num_entities: int,
    passages: list[list[int]] | None = None,
    passage_ids: list[str] | None = None,
    links: dict[str, list[int]] | None = None,
) -> KGIndex:
    """A KGIndex over ``num_entities`` entities; ``passages[j]`` lists the entities passage j mentions."""
    triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    passages = passages if passages is not None else [[]]
    rows = [e for ents in passages for e in ents]
    cols = [j for j, ents in enumerate(passages) for _ in ents]
    ent2doc = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(num_entities, len(passages)))
    n_rel = int(triples[:, 1].max()) + 1 if len(triples) else 1
    return KGIndex(
        entities=[f"e{i}" for i in range(num_entities)],
        relations=[f"r{i}" for i in range(n_rel)],
        triples=triples,
        passage_ids=passage_ids or [f"p{j}" for j in range(len(passages))],
        entity_passages=ent2doc,
        question_links={q: [EntityLink(f"m{e}", e, 1.0) for e in es] for q, es in (links or {}).items()},
    )


def random_kg(num_entities: int, num_triples: int, seed: int = 0, hubs: int = 3) -> KGIndex:
    """A random KG with a few hubs, parallel triples, self-loops and isolated entities."""
    rng = np.random.default_rng(seed)
    weight = np.ones(num_entities)
    weight[rng.choice(num_entities, hubs, replace=False)] = num_entities / 10  # hubs
    weight[rng.choice(num_entities, num_entities // 20, replace=False)] = 0  # isolated entities
    weight /= weight.sum()
    heads = rng.choice(num_entities, num_triples, p=weight)
    tails = rng.choice(num_entities, num_triples, p=weight)
    triples = np.stack([heads, rng.integers(0, 4, num_triples), tails], axis=1)
    triples = np.concatenate([triples, triples[:5]])  # parallel duplicates
    passages = [rng.choice(num_entities, 4, replace=False).tolist() for _ in range(num_entities // 4)]
    return build_kg(triples, num_entities, passages)


@pytest.fixture
def kg():
    """The factory :func:`build_kg`."""
    return build_kg


@pytest.fixture
def random_graph():
    """The factory :func:`random_kg`."""
    return random_kg
