import numpy as np
import pytest

from glmrag.data.types import Question
from glmrag.graph.reachability import ReachabilityRow, density_terciles, format_table, gold_reachability
from glmrag.graph.subgraph import select_subgraph
from glmrag.index.kg import EntityLink

# Chain 3 - 2 - 1 - 0 - 4 - 5:  t0 (0,1) t1 (1,2) t2 (2,3) t3 (0,4) t4 (4,5)
CHAIN = [(0, 0, 1), (1, 0, 2), (2, 0, 3), (0, 0, 4), (4, 0, 5)]
# passages: pa1 mentions 2, pa2 mentions 5, pb1 mentions 3, pc1 mentions 0, px mentions 1
PASSAGES = [[2], [5], [3], [0], [1]]
PIDS = ["pa1", "pa2", "pb1", "pc1", "px"]


def q(qid, supporting):
    return Question(qid, f"question {qid}", ("answer",), tuple(supporting))


@pytest.fixture
def chain(kg):
    links = {"A": [0], "B": [3], "C": []}
    return kg(CHAIN, num_entities=6, passages=PASSAGES, passage_ids=PIDS, links=links)


def test_hand_computed_reachability(chain):
    questions = [
        q("A", ["pa1", "pa2"]),  # seeds {0}: density 4; gold at 2 hops (entities 2 and 5)
        q("B", ["pb1", "missing"]),  # seeds {3}: density 2; pb1 holds the seed itself, "missing" is not indexed
        q("C", ["pc1"]),  # no linked entity: density 0, nothing reachable
        q("D", []),  # no gold: left out
    ]
    rows = gold_reachability(questions, chain, hops=(1, 2), triplets=(1, 3, 10))
    table = {(r.density, r.max_hops, r.max_triplets): (r.questions, r.gold, r.reachable) for r in rows}
    assert len(rows) == 4 * 2 * 3
    for h in (1, 2):
        for t in (1, 3, 10):
            assert table[("sparse", h, t)] == (1, 1, 0)  # C
            assert table[("medium", h, t)] == (1, 2, 1)  # B
    # A: 1 hop reaches entities {0, 1, 4} only; with 2 hops, 1 triple reaches 1 or 4 (no gold),
    # 3 triples add exactly one of t1 / t4 (one gold passage), 10 triples everything
    expected_dense = {(1, 1): 0, (1, 3): 0, (1, 10): 0, (2, 1): 0, (2, 3): 1, (2, 10): 2}
    for (h, t), reach in expected_dense.items():
        assert table[("dense", h, t)] == (1, 2, reach)
        assert table[("all", h, t)] == (3, 5, reach + 1)
    assert rows[-1] == ReachabilityRow("all", 2, 10, 3, 5, 3) and rows[-1].fraction == pytest.approx(0.6)


def test_terciles_are_equal_sized_and_deterministic():
    assert density_terciles([5, 0, 9]) == ["medium", "sparse", "dense"]
    labels = density_terciles([0, 0, 0, 0, 0, 0, 0])  # ties split by position
    assert labels == ["sparse"] * 3 + ["medium"] * 2 + ["dense"] * 2
    assert density_terciles([]) == []


def test_prefix_shortcut_matches_direct_selection(random_graph):
    index = random_graph(400, 1500, seed=2, hubs=4)
    rng = np.random.default_rng(0)
    questions = []
    for i in range(15):
        qid = f"q{i}"
        seeds = rng.choice(index.num_entities, rng.integers(1, 3), replace=False).tolist()
        index.question_links[qid] = [EntityLink("m", int(s), 1.0) for s in seeds]
        gold = rng.choice(index.num_passages, 2, replace=False)
        questions.append(q(qid, [index.passage_ids[g] for g in gold]))
    hops, triplets = (1, 2, 3), (5, 40, 200)
    rows = gold_reachability(questions, index, hops=hops, triplets=triplets, seed=3)
    by_cell = {(r.max_hops, r.max_triplets): r.reachable for r in rows if r.density == "all"}
    pe = index.passage_entities
    for h in hops:
        for t in triplets:
            direct = 0
            for question in questions:
                sub = select_subgraph(index, index.seeds(question.id), max_hops=h, max_triplets=t, seed=3)
                for pid in question.supporting:
                    ents = pe[index.passage_position[pid]].indices
                    direct += bool(np.isin(ents, sub.entities).any())
            assert by_cell[(h, t)] == direct
    # more budget never reaches less, and the density groups partition the questions
    reach = np.array([[by_cell[(h, t)] for t in triplets] for h in hops])
    assert (np.diff(reach, axis=0) >= 0).all() and (np.diff(reach, axis=1) >= 0).all()
    sizes = [r.questions for r in rows if r.max_hops == 1 and r.max_triplets == 5]
    assert sizes == [5, 5, 5, 15]


def test_format_table(chain):
    rows = gold_reachability([q("A", ["pa1", "pa2"])], chain, hops=(1, 2), triplets=(3, 10))
    text = format_table(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["group", "hops", "n", "3", "10"]
    assert "all" in lines[-1] and lines[-1].split()[-2:] == ["50.0%", "100.0%"]
