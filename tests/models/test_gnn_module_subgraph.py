"""GFM-RAG* restricted to the GLM's subgraphs (GLM-RAG §5.5, Table 3): selection, loss, checkpoints, configs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import lightning
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from glmrag.data.types import Corpus, Passage
from glmrag.datamodules.glm_inputs import SubgraphSettings, load_tokenizer, question_record
from glmrag.datamodules.kg_source import StaticKGs
from glmrag.graph.subgraph import select_subgraph
from glmrag.index.embed import Embedder
from glmrag.index.synthetic import random_kg, random_questions
from glmrag.models.checkpointing import HPARAMS_LAYOUT, HPARAMS_LAYOUT_KEY
from glmrag.models.gnn_module import GNNRetrieverModule
from glmrag.models.losses import gfm_rag_loss
from glmrag.models.retriever_module import MODULE_CLASS_KEY
from glmrag.nn.graph_inputs import graph_inputs, seed_weights
from glmrag.retrievers.checkpoint import CheckpointRetriever

ROOT = Path(__file__).resolve().parents[2]
MODEL = "offline:all-MiniLM-L6-v2"
DIM = 8
BUDGETS = (600, 500, 400, 300)  # GLM-RAG Table 3
TINY = {"gnn": {"hidden_channels": 8, "num_layers": 2, "question_dim": DIM, "relation_dim": DIM, "node_dim": DIM}}


class RandomEncoder:
    """Seeded random unit vectors, one per text position: no model to load."""

    def encode(self, texts):
        gen = torch.Generator().manual_seed(len(texts))
        return torch.nn.functional.normalize(torch.randn(len(texts), DIM, generator=gen), dim=-1).numpy()


@pytest.fixture(scope="module")
def kg():
    """A random KG of 80 entities and 12 questions whose 2-hop neighbourhoods exceed a 15-triple budget."""
    index = random_kg(80, 300, seed=11)
    questions = random_questions(index, 12, seed=4)
    return index, questions, graph_inputs(index, RandomEncoder(), node_features=False)


def module_on(index, graph, **subgraph) -> GNNRetrieverModule:
    """A tiny module whose KG ``toy`` is ``index`` and ``graph``; ``subgraph``: the fields of its ``subgraph`` node."""
    torch.manual_seed(0)
    return GNNRetrieverModule(**TINY, subgraph=subgraph, kgs=StaticKGs({"toy": index}, {"toy": graph})).eval()


def qa_batch(index, questions, target_rows) -> dict:
    ids = [q.id for q in questions]
    target = torch.zeros(len(ids), index.num_entities)
    for row, ents in enumerate(target_rows):
        target[row, ents] = 1.0
    torch.manual_seed(1)
    return {
        "kg": "toy",
        "question_ids": ids,
        "question_emb": torch.randn(len(ids), DIM),
        "seed_weight": seed_weights(index, ids),
        "target": target,
        "real": torch.ones(len(ids), dtype=torch.bool),
    }


def test_the_gnn_reads_the_glm_subgraphs(kg):
    """Same settings, same triplets: the entities the GNN scores are the entity nodes of the GLM's record."""
    index, questions, graph = kg
    tokenizer = load_tokenizer(MODEL)
    for seed in (0, 1):
        model = module_on(index, graph, max_hops=2, max_triplets=15, seed=seed)
        sub = model.subgraphs("toy", [q.id for q in questions])
        mask = sub.entity_mask(index.num_entities)
        settings = SubgraphSettings(max_hops=2, max_triplets=15, seed=seed)
        for row, q in enumerate(questions):
            record = question_record(index, q, "toy", tokenizer, settings, np.zeros(DIM))
            glm = {int(e) for e in record["entity_of_node"] if e >= 0}
            assert set(mask[row].nonzero().flatten().tolist()) == glm
            assert int((sub.node_question[sub.edge_index[0]] == row).sum()) == 2 * record["num_triples"]
    assert sum(len(s.triples) for s in model._subgraphs.values()) == 15 * len(questions)  # every budget binds
    other = module_on(index, graph, max_triplets=15, seed=0).subgraphs("toy", [q.id for q in questions])
    assert not torch.equal(other.entity_mask(index.num_entities), mask)  # the BFS seed matters


def reference_logits(gnn, graph, question_emb: torch.Tensor, seed_weight: torch.Tensor) -> torch.Tensor:
    """GFM-RAG's query-dependent GNN written out densely from its equations, with ``gnn``'s weights only.

    h0_v = w_v q (the question at its seeds); per layer, with per-layer relation vectors r = MLP_l(R W_rel):
    a_v = sum over edges u -r-> v of h_u * r + h0_v, h_v <- h_v + relu(LayerNorm(W_l [h_v, a_v]));
    logit_v = MLP_out([h_v, q]). One adjacency matrix per edge type replaces the message passing.

    Shapes: question_emb (B, d), seed_weight (B, E) -> (B, E).
    """
    assert gnn.node_proj is None  # GFM-RAG*: no entity features in h0
    num_entities, num_types = graph.num_nodes, graph.relation_features.shape[0]
    adjacency = torch.zeros(num_types, num_entities, num_entities)  # (T, E, E): [r, v, u] counts u -r-> v
    source, target = graph.edge_index
    adjacency.index_put_((graph.edge_type, target, source), torch.ones(len(source)), accumulate=True)
    q = gnn.question_proj(question_emb)  # (B, H)
    relations = gnn.relation_proj(graph.relation_features)  # (T, H)
    h0 = seed_weight.unsqueeze(-1) * q.unsqueeze(1)  # (B, E, H)
    h = h0
    for conv in gnn.convs:
        r = conv.relation_proj(relations)  # (T, H)
        aggregate = torch.einsum("tvu,buh,th->bvh", adjacency, h, r) + h0  # (B, E, H)
        h = h + torch.relu(conv.norm(conv.linear(torch.cat([h, aggregate], dim=-1))))  # (B, E, H)
    return gnn.readout(torch.cat([h, q.unsqueeze(1).expand_as(h)], dim=-1)).squeeze(-1)  # (B, E)


def test_whole_graph_module_is_unchanged(kg):
    """max_triplets None: no subgraphs, the logits of the whole-KG GNN and GFM-RAG's unmasked loss."""
    index, questions, graph = kg
    model = module_on(index, graph)
    batch = qa_batch(index, questions[:4], [[1, 2], [3], [4, 5, 6], [7]])
    assert model.subgraphs("toy", batch["question_ids"]) is None
    loss, logits = model.model_step(batch)
    with torch.no_grad():
        expected = reference_logits(model.gnn, graph, batch["question_emb"], batch["seed_weight"])
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(logits).all() and logits.std() > 0  # the readout separates entities
    torch.testing.assert_close(loss, gfm_rag_loss(expected, batch["target"], bce_weight=0.3, listce_weight=0.7))


def test_loss_ignores_entities_outside_the_subgraph(kg):
    """The loss is GFM-RAG's over each question's subgraph entities alone (the GLM's masked ListCE)."""
    index, questions, graph = kg
    model = module_on(index, graph, max_triplets=15)
    qs = questions[:3]
    subs = [model._subgraphs.get(("toy", q.id)) for q in qs]
    sub = model.subgraphs("toy", [q.id for q in qs])
    ents = [np.asarray(model._subgraphs["toy", q.id].entities) for q in qs]
    outside = [np.setdiff1d(np.arange(index.num_entities), e) for e in ents]
    rows = [[*e[-2:], *o[:3]] for e, o in zip(ents, outside, strict=True)]  # targets inside and outside
    batch = qa_batch(index, qs, rows)
    loss, logits = model.model_step(batch)
    assert subs == [None] * 3 and torch.equal(torch.isfinite(logits), sub.entity_mask(index.num_entities))

    per_question = [
        gfm_rag_loss(logits[b, e][None], batch["target"][b, e][None]) for b, e in enumerate(ents)
    ]  # the scored entities as if they were the whole KG
    torch.testing.assert_close(loss, torch.stack(per_question).mean(), atol=1e-6, rtol=0)
    moved = dict(batch, target=batch["target"].clone())
    moved["target"][0, outside[0][3:20]] = 1.0  # more positives the subgraph cannot rank
    assert torch.equal(model.model_step(moved)[0], loss)

    model.train()
    loss, _ = model.model_step(batch)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_restricted_module_needs_subgraphs(kg):
    index, questions, graph = kg
    model = module_on(index, graph, max_triplets=15)
    batch = qa_batch(index, questions[:2], [[1], [2]])
    with pytest.raises(ValueError, match="max_triplets=15: pass subgraphs"):
        model(graph, batch["question_emb"], batch["seed_weight"])
    with pytest.raises(ValueError, match="max_triplets=-1"):
        GNNRetrieverModule(**TINY, subgraph={"max_triplets": -1})


def test_checkpoint_retriever_rebuilds_the_subgraphs(tmp_path):
    """The retriever restricts each question to the GLM record's triples from the checkpoint alone."""
    index = random_kg(50, 160, seed=2)
    questions = random_questions(index, 5, seed=6)
    corpus = Corpus([Passage(p, p, p) for p in index.passage_ids])
    dims = {"question_dim": 384, "relation_dim": 384, "node_dim": 384}
    torch.manual_seed(0)
    module = GNNRetrieverModule(
        gnn={"hidden_channels": 8, "num_layers": 2, **dims}, subgraph={"max_triplets": 12, "seed": 3}, embed_model=MODEL
    )
    ckpt = {
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "pytorch-lightning_version": lightning.__version__,
        HPARAMS_LAYOUT_KEY: HPARAMS_LAYOUT,
        MODULE_CLASS_KEY: "glmrag.models.gnn_module.GNNRetrieverModule",
    }
    torch.save(ckpt, tmp_path / "gnn.ckpt")

    def entity_logits(path) -> torch.Tensor:
        """(Q, E): every entity's score in the checkpoint retriever's rankings (all entities returned)."""
        retriever = CheckpointRetriever(str(path), top_entities=index.num_entities, cache_dir=str(tmp_path / "inputs"))
        out = torch.empty(len(questions), index.num_entities)
        for row, ranking in enumerate(retriever.retrieve(questions, index, corpus)):
            out[row, ranking.entity_ids] = torch.tensor(ranking.entity_scores)
        return out

    logits = entity_logits(tmp_path / "gnn.ckpt")
    graph = graph_inputs(index, Embedder(MODEL), node_features=False)
    query = torch.from_numpy(Embedder(MODEL).encode([q.question for q in questions]))
    weight = seed_weights(index, [q.id for q in questions])
    settings = SubgraphSettings(max_hops=2, max_triplets=12, seed=3)
    tokenizer = load_tokenizer(MODEL)
    truncated = 0
    for b, q in enumerate(questions):
        record = question_record(index, q, "toy", tokenizer, settings, np.zeros(384))
        sub = select_subgraph(index, index.seeds(q.id), 2, 12, seed=settings.bfs_seed(q.id))  # the GLM's call
        ents = torch.as_tensor(sub.entities)
        assert set(sub.entities.tolist()) == {int(e) for e in record["entity_of_node"] if e >= 0}
        head, rel, tail = torch.as_tensor(index.triples[sub.triples]).reshape(-1, 3).unbind(1)
        alone = dataclasses.replace(  # the KG of this question's subgraph triples only
            graph,
            edge_index=torch.stack([torch.cat([head, tail]), torch.cat([tail, head])]),
            edge_type=torch.cat([rel, rel + graph.num_relations]),
        )
        with torch.no_grad():
            expected = module.gnn(alone, query[b : b + 1], weight[b : b + 1])[0]
        torch.testing.assert_close(logits[b, ents], expected[ents], atol=1e-5, rtol=0)
        assert int(torch.isfinite(logits[b]).sum()) == len(ents)
        truncated += sub.truncated
    assert truncated >= 3  # the budget binds for most questions

    ckpt["hyper_parameters"]["subgraph"] = {"max_triplets": None}  # the whole KG
    torch.save(ckpt, tmp_path / "old.ckpt")
    assert torch.isfinite(entity_logits(tmp_path / "old.ckpt")).all()


# --- configs: Table 3 -----------------------------------------------------------------------------------


def _compose(overrides, return_hydra_config=False):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=return_hydra_config)


def test_table_3_systems_restrict_both_families_alike():
    base = _compose(["experiment=gfm_rag_star", "output_dir=x"]).model
    assert base.subgraph == {"max_triplets": None, "max_hops": 2, "seed": 0}
    for budget in BUDGETS:
        gnn = _compose([f"+system=gfm_rag_star_t{budget}", "output_dir=x"])
        glm = _compose([f"+system=glm_t{budget}", "output_dir=x"])
        assert (gnn.model_name, gnn.family) == (f"gfm_rag_star_t{budget}", "gfm_rag_star")
        assert gnn.model._target_.endswith("GNNRetrieverModule") and not gnn.model.gnn.use_node_features
        for key in ("max_hops", "max_triplets", "seed"):
            assert gnn.model.subgraph[key] == glm.model.subgraph[key], key
        assert gnn.model.subgraph.max_triplets == budget
    params = _compose(["experiment=study_subgraph_restriction", "output_dir=x"], True).hydra.sweeper.params
    systems = params["+system"].split(",")
    assert systems == ["gfm_rag_star", *(f"gfm_rag_star_t{t}" for t in BUDGETS), *(f"glm_t{t}" for t in BUDGETS)]


@pytest.mark.integration  # builds the musique100 index and its GNN inputs first (minutes on two busy cores)
@pytest.mark.parametrize("budget", BUDGETS)
def test_restricted_systems_run_fast_dev_run(budget, glmrag_cache, tmp_path):
    from glmrag.jobs.train import run_train

    paths = [f"output_dir={tmp_path / 'out'}", f"checkpoint_dir={tmp_path / 'ckpt'}", f"results_dir={tmp_path / 'r'}"]
    tiny = ["model.gnn.hidden_channels=8", "model.gnn.num_layers=1", "data.limit=8", "logger=[csv]"]
    tiny += ["index.embed_model=offline:all-MiniLM-L6-v2", "index.embed_dim=384"]  # offline, not the paper mpnet
    cfg = _compose([f"+system=gfm_rag_star_t{budget}", *tiny, *paths, "+trainer.fast_dev_run=true"])
    assert cfg.run_name == f"gfm_rag_star_t{budget}-musique100"
    out = run_train(cfg)
    assert np.isfinite(out["metrics"]["train/loss"]) and out["metrics"]["train/loss"] >= 0.0
    assert out["best_checkpoint"] is None and out["stored"] == []
