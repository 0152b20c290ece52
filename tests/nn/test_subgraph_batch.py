"""SubgraphBatch.from_triples: the disjoint union of per-question subgraphs, field by field."""

import numpy as np
import pytest
import torch

from glmrag.nn.subgraph_batch import SubgraphBatch


def random_subgraphs(seed: int, questions: int = 5, num_entities: int = 30, num_relations: int = 4):
    """Per question: distinct entities (in random order, one question without any) and triples among them."""
    rng = np.random.default_rng(seed)
    triples, entities = [], []
    for b in range(questions):
        n = 0 if b == 2 else int(rng.integers(1, 9))
        ents = rng.choice(num_entities, n, replace=False)
        s = int(rng.integers(0, 12)) if n else 0
        rows = np.stack([rng.choice(ents, s), rng.integers(0, num_relations, s), rng.choice(ents, s)], axis=1)
        triples.append(rows.reshape(-1, 3))
        entities.append(ents)
    return triples, entities, num_relations


def expected_union(triples, entities, num_relations):
    """The union written out with plain loops: question b's nodes follow every node of questions before it."""
    node_entity, node_question, heads, tails, types = [], [], [], [], []
    offset = 0
    for b, (rows, ents) in enumerate(zip(triples, entities, strict=True)):
        position = {int(e): offset + i for i, e in enumerate(ents)}
        node_entity += [int(e) for e in ents]
        node_question += [b] * len(ents)
        for h, r, t in rows.tolist():
            heads.append(position[h])
            tails.append(position[t])
            types.append(r)
        offset += len(ents)
    edge_types = types + [r + num_relations for r in types]  # forward edges, then every inverse
    relation_ids = sorted(set(edge_types))
    return {
        "node_entity": node_entity,
        "node_question": node_question,
        "edge_index": [heads + tails, tails + heads],
        "relation_ids": relation_ids,
        "edge_relation": [relation_ids.index(t) for t in edge_types],
    }


@pytest.mark.parametrize("seed", range(4))
def test_union_equals_the_offsets_written_out(seed):
    triples, entities, num_relations = random_subgraphs(seed)
    batch = SubgraphBatch.from_triples(triples, entities, num_relations)
    expected = expected_union(triples, entities, num_relations)
    assert batch.num_questions == len(triples)
    assert batch.num_nodes == sum(len(e) for e in entities)
    for field, value in expected.items():
        tensor = getattr(batch, field)
        assert tensor.dtype == torch.int64, field
        assert tensor.tolist() == value, field


def test_no_question_gives_an_empty_union():
    batch = SubgraphBatch.from_triples([], [], num_relations=3)
    assert batch.num_questions == 0 and batch.num_nodes == 0
    assert batch.edge_index.shape == (2, 0) and batch.relation_ids.numel() == batch.edge_relation.numel() == 0
