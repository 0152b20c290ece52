"""HyperAddress ablations (§5.3, App. A) and head selection: each switch changes what the method does."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hyper_world import CORPUS, world_index
from stand_ins import HashEncoder
from transformers import AutoTokenizer

from glmrag.data.types import Question
from glmrag.graph.hypergraph import Hypergraph
from glmrag.index.embed import DEFAULT_MODEL, resolve_model_path
from glmrag.retrievers.hyperaddress import addressing_heads
from glmrag.retrievers.hyperaddress.addressing_heads import random_heads, select_heads
from glmrag.retrievers.hyperaddress.reader_pointers import Reader, entity_pointer

ROOT = Path(__file__).resolve().parents[2]
QUESTION = Question("q", "Where was the first president of the publisher of Journal X born?", ("Boston",), ())


@pytest.fixture(scope="module")
def parts(tiny_llama):
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    return tiny_llama(tokenizer.vocab_size, max_position_embeddings=512), tokenizer


def description_reply(text: str) -> str:
    """Every listed entity of the last passage described as "entity as described by an LLM"."""
    entities = json.loads(text.rsplit("Entities: ", 1)[1].split("\n", 1)[0])
    return json.dumps({e: [f"{e} as described by an LLM"] for e in entities})


def scripted_reader(scripted_llm, parts):
    """A reader over the tiny model whose LLM answers the generated-name prompt with "Ann Lee"."""
    llm = scripted_llm(lambda text: "Ann Lee" if text.rstrip().endswith("Name:") else description_reply(text))
    llm.model, llm.tokenizer = parts
    return Reader.from_llm(llm, max_tokens=512)


def test_last_token_reads_only_the_last_question_row():
    scores = torch.tensor([[[0.1, 0.9], [0.5, 0.2]], [[0.3, 0.7], [0.1, 0.4]]])  # (H=2, R=2, C=2)
    assert entity_pointer(scores, "word") == pytest.approx([(0.5 + 0.3) / 2, (0.9 + 0.7) / 2])
    assert entity_pointer(scores, "last_token") == pytest.approx([(0.5 + 0.1) / 2, (0.2 + 0.4) / 2])


def test_random_heads_are_seeded_and_distinct(parts):
    reader = Reader(*parts, name="tiny")
    heads = random_heads(reader, 3, seed=1)
    assert heads == random_heads(reader, 3, seed=1) and len(set(heads)) == 3 and heads == sorted(heads)
    assert any(random_heads(reader, 3, seed=s) != heads for s in range(2, 6))
    with pytest.raises(ValueError, match="exceeds"):
        random_heads(reader, 9)


def test_random_head_set_draws_heads_without_probes(parts, monkeypatch):
    from glmrag.retrievers.hyperaddress import Steering, SteeringSettings

    reader = Reader(*parts, name="tiny")
    graph = Hypergraph.from_index(world_index(), CORPUS)
    monkeypatch.setattr(addressing_heads, "score_heads", lambda *a: pytest.fail("random heads need no probes"))
    steering = Steering(reader, SteeringSettings(head_set="random", num_heads=3), seed=1)
    assert steering.addressing_heads(graph, lambda p: CORPUS[p]) == random_heads(reader, 3, seed=1)
    assert steering.selection is None


def test_ties_are_not_hits_and_hit_rate_is_held_out(parts, monkeypatch):
    reader = Reader(*parts, name="tiny")
    graph = Hypergraph.from_index(world_index(), CORPUS)
    level = torch.ones(8, 3, 4)  # every head scores every candidate the same
    monkeypatch.setattr(addressing_heads, "pointer_scores", lambda r, c, h: level[:, :, : len(c.candidates)])
    probes = addressing_heads.make_probes(graph, lambda p: CORPUS[p], 6, 3, 0)
    hits, rr, used = addressing_heads.score_heads(reader, probes)
    assert used > 0 and hits.sum() == 0  # a target tied with the others is not ranked first
    seen = []
    score = addressing_heads.score_heads
    monkeypatch.undo()
    monkeypatch.setattr(addressing_heads, "score_heads", lambda r, p: seen.append(p) or score(r, p))
    selection = select_heads(reader, graph, lambda p: CORPUS[p], num_heads=2, probes=6, context_passages=3)
    selection_half, held_out = seen
    assert selection_half == probes[0::2] and held_out == probes[1::2]  # disjoint halves of the same probes
    assert selection.held_out_probes > 0 and len(selection.held_out_hit_rate) == 2
    assert all(0.0 <= r <= 1.0 for r in selection.held_out_hit_rate)


STEERED = [
    "hyperaddress_1round",
    "hyperaddress_random_heads",
    "hyperaddress_last_token",
    "hyperaddress_no_labels",
    "hyperaddress_no_transitions",
    "hyperaddress_generated_name",
]


def config_trace(key, reader, tmp_path, monkeypatch, scripted_llm=None):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    import glmrag.index.cache  # noqa: F401  (registers the ${glmrag_cache:...} resolver)

    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=[f"retriever=[{key}]", "output_dir=unused"])
    node = cfg.retriever[key]
    if node.get("steering"):
        node.steering.reader = None  # the tiny reader stands in for SmolLM2
        if node.steering.settings.head_set == "selected":
            node.steering.settings.heads = [[0, 0], [1, 1]]
    kwargs = {"encoder": _hash_encoder()}
    if node.get("describer") and "llm" in node.describer:
        kwargs["describer"] = instantiate(node.describer, llm=reader.llm)
    retriever = instantiate(node, **kwargs)
    if retriever.steering is not None:
        retriever.steering.reader = reader
    (ranking,) = retriever.retrieve([QUESTION], world_index(), CORPUS, top_k=3)
    assert len(ranking.passage_ids) == 3
    return retriever.traces()["q"], retriever


def _hash_encoder():
    return HashEncoder(8)


CHANGES = {
    "hyperaddress_1round": lambda t: len(t["rounds"]) == 1 and t["rounds"][0]["rewrite"] is None,
    "hyperaddress_random_heads": lambda t: t["heads"] != [[0, 0], [1, 1]],
    "hyperaddress_no_labels": lambda t: all(label == entity for _, entity, label, _ in t["restart"]),
    "hyperaddress_generated_name": lambda t: t["rounds"][0].get("generated_name") == "Ann Lee",
}
"""What each steered ablation's trace shows (beyond differing from the default's); the last-token pointer and
the unsteered transitions read the same passages first and then rank differently."""


@pytest.mark.parametrize("key", STEERED)
def test_each_steered_config_changes_the_trace(key, scripted_llm, parts, tmp_path, monkeypatch):
    reader = scripted_reader(scripted_llm, parts)
    default, _ = config_trace("hyperaddress_2rounds", reader, tmp_path, monkeypatch)
    ablated, _ = config_trace(key, reader, tmp_path, monkeypatch)
    assert ablated != default
    if key in CHANGES:
        assert CHANGES[key](ablated) and not CHANGES[key](default)
    else:
        assert ablated["rounds"][0]["read"] == default["rounds"][0]["read"]
        assert [r["ranking"] for r in ablated["rounds"]] != [r["ranking"] for r in default["rounds"]]


def test_llm_descriptions_change_the_walk_trace(scripted_llm, parts, tmp_path, monkeypatch):
    reader = scripted_reader(scripted_llm, parts)
    walk, _ = config_trace("hyperaddress", reader, tmp_path, monkeypatch)
    described, retriever = config_trace("hyperaddress_llm", reader, tmp_path, monkeypatch)
    assert "rounds" not in walk and "rounds" not in described
    assert [r[2] for r in walk["restart"]] != [r[2] for r in described["restart"]]
    assert retriever.index_llm_cost()["hyperaddress_descriptions"].calls > 0


def test_summary_counts_rewrites_and_rounds(scripted_llm, parts, tmp_path, monkeypatch):
    reader = scripted_reader(scripted_llm, parts)
    _, retriever = config_trace("hyperaddress_2rounds", reader, tmp_path, monkeypatch)
    summary = retriever.trace_summary()["steering"]
    trace = retriever.traces()["q"]
    fired = sum(isinstance(r["rewrite"], dict) for r in trace["rounds"])
    assert summary["questions"] == 1 and summary["rounds"] == 2
    assert summary["rewrites_fired"] == fired and summary["rewrites_fired"] + summary["rewrites_not_fired"] == 1
    from glmrag.eval.traces import question_decisions  # what the evaluator's tables read from this trace

    pointed = all(r["targets"] and r["targets"][0][1] > 0 for r in trace["rounds"])
    assert question_decisions(trace) == {"pointer": not pointed, "rewrite": fired == 0}
    assert np.isfinite([v for _, v in trace["rounds"][-1]["ranking"]]).all()


def test_generated_name_gives_its_entity_the_full_pointer_share(scripted_llm, parts, monkeypatch):
    # App. A: the generated name's entity "replaces the rewriting choice and receives the full restart share"
    from test_hyperaddress_rewrite import WordEncoder

    from glmrag.retrievers.hyperaddress import HyperAddressRetriever, HyperAddressSettings, Steering, SteeringSettings

    restarts = []
    pagerank = HyperAddressRetriever.pagerank

    def recording(self, graph, weights, r_p, r_e):
        restarts.append((r_p.copy(), r_e.copy()))
        return pagerank(self, graph, weights, r_p, r_e)

    monkeypatch.setattr(HyperAddressRetriever, "pagerank", recording)
    reader = scripted_reader(scripted_llm, parts)  # names the bridge "Ann Lee"
    steering = Steering(
        reader, SteeringSettings(rounds=1, read_top=3, heads=[(0, 0)], target="generated_name", transition_gain=0.0)
    )
    retriever = HyperAddressRetriever(HyperAddressSettings(restart_top=5), encoder=WordEncoder(), steering=steering)
    index = world_index()
    retriever.retrieve([QUESTION], index, CORPUS, top_k=3)
    (step,) = steering.traces["q"]["rounds"]
    assert step["generated_name"] == "Ann Lee" and len(step["targets"]) >= 2
    assert step["targets"][0] == ["ann lee", 1.0] and all(score == 0.0 for _, score in step["targets"][1:])
    from glmrag.eval.traces import question_decisions

    assert question_decisions(steering.traces["q"]) == {"generated name": False}  # a name came: no fallback
    q_p, q_e = retriever.restart_for(retriever.prepare(index, CORPUS), [QUESTION.question])
    share = np.zeros(index.num_entities)
    share[index.entities.index("ann lee")] = 1.0  # all of the pointer term's mass on the named entity
    final_p, final_e = restarts[-1]
    assert final_p == pytest.approx(q_p[:, 0] / 2) and final_e == pytest.approx((q_e[:, 0] + share) / 2)
