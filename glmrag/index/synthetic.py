"""Synthetic KG indexes built directly from triples, for tests and benchmarks.

They skip extraction and embedding: entities are named ``e<i>``, relations
``r<i>`` and passages ``p<j>``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from glmrag.data.types import Question
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


def power_law_index(
    num_entities: int,
    num_triples: int,
    num_relations: int,
    num_passages: int,
    exponent: float = 0.9,
    seed: int = 0,
) -> KGIndex:
    """A random KG whose entity degrees follow a Zipf-like law (popularity ``rank ** -exponent``).

    Each entity is mentioned in 1 + Poisson(0.3) random passages.
    """
    rng = np.random.default_rng(seed)
    popularity = (np.arange(num_entities) + 1.0) ** -exponent
    popularity = rng.permutation(popularity / popularity.sum())
    heads = rng.choice(num_entities, num_triples, p=popularity)
    tails = rng.choice(num_entities, num_triples, p=popularity)
    rels = rng.integers(0, num_relations, num_triples)
    mentions = 1 + rng.poisson(0.3, num_entities)
    rows = np.repeat(np.arange(num_entities), mentions)
    cols = rng.integers(0, num_passages, rows.size)
    ent2doc = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(num_entities, num_passages))
    ent2doc.data[:] = 1.0
    return KGIndex(
        entities=[f"e{i}" for i in range(num_entities)],
        relations=[f"r{i}" for i in range(num_relations)],
        triples=np.stack([heads, rels, tails], axis=1),
        passage_ids=[f"p{i}" for i in range(num_passages)],
        entity_passages=ent2doc,
    )


def random_questions(index: KGIndex, n: int, seed: int = 1) -> list[Question]:
    """``n`` questions with 1-4 seed entities drawn uniformly (linked into ``index.question_links``)."""
    rng = np.random.default_rng(seed)
    questions = []
    for i in range(n):
        qid = f"q{i}"
        seeds = rng.choice(index.num_entities, rng.integers(1, 5), replace=False)
        index.question_links[qid] = [EntityLink(f"m{s}", int(s), 1.0) for s in seeds]
        questions.append(Question(qid, f"question {i}", ("a",), ()))
    return questions


def clustered_embeddings(n: int, dim: int = 384, seed: int = 0, spread: float = 0.5) -> np.ndarray:
    """``n`` unit vectors shaped like entity-phrase embeddings, for timing and recall of synonym search.

    Entities come in clusters of Zipf-like sizes (most alone, a few with many spellings), each member
    its cluster's centre plus isotropic noise whose size varies per entity, so that pairs inside a
    cluster fall on both sides of a 0.8 cosine; all centres share a common direction (weight
    ``spread``), as sentence embeddings do (unrelated MiniLM phrases score about 0.1-0.3).

    Shapes: -> (n, dim) float32 with unit rows.
    """
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.zipf(2.5, n), 50)  # cluster sizes: about 75% alone, at most 50
    cluster = rng.permutation(np.repeat(np.arange(n), sizes)[:n])  # (n,) cluster id of each entity
    common = rng.normal(size=dim)
    common /= np.linalg.norm(common)
    centres = rng.normal(size=(cluster.max() + 1, dim)) / np.sqrt(dim) + spread * common
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    # noise of squared norm about (0.5 * u)^2: two members then score about 1 / (1 + noise^2) in 0.6-1.0
    noise = rng.normal(size=(n, dim)) * (0.5 * rng.uniform(0.2, 1.6, (n, 1)) / np.sqrt(dim))
    out = centres[cluster] + noise
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)
