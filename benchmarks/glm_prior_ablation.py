"""What a GLM (or GNN) trained on a prior adds beyond re-weighting that prior (issue 32).

A model with ``model.prior`` learns three things: the prior's weight ``w`` (from 1), the dense weight ``b`` (from
``prior.dense_weight``) and the network's correction. This script ranks a dataset's questions by the prior alone
at the checkpoint's learned ``w`` and ``b`` (the correction set to zero) and at their starting values (the untrained
model), so that a trained model's score splits into what re-weighting gave and what the network gave. Recall@2 /
@5 over the questions with gold passages, as the evaluator's (``glmrag.index.ranking_metrics``).

    python benchmarks/glm_prior_ablation.py <checkpoint> [--data 2wiki_test] [--extractor spacy]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

import glmrag
from glmrag.datamodules.gnn_input_cache import cached_passage_embeddings
from glmrag.index.embed import Embedder
from glmrag.index.ranking import top_k_stable
from glmrag.index.ranking_metrics import recall_at_k
from glmrag.io import load_checkpoint_dict
from glmrag.nn.graph_inputs import seed_weights
from glmrag.nn.prior import EntityPrior, PriorSettings, passage_logits, prior_kg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("--data", default="2wiki_test")
    parser.add_argument("--extractor", default="spacy", help="the index the checkpoint was evaluated on")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    checkpoint = load_checkpoint_dict(args.checkpoint)
    hparams, state = checkpoint["hyper_parameters"], checkpoint["state_dict"]
    settings = PriorSettings(**hparams["prior"])
    learned = {"w": float(state["prior.weight"]), "b": float(state["prior.dense_weight"])}
    data = glmrag.load_data(args.data)
    index = glmrag.build_index(data, extractor=args.extractor)
    questions = [q for q in data.qa if q.supporting]
    embed_model = hparams["embed_model"]
    kg = prior_kg(index, cached_passage_embeddings(data.corpus, index, embed_model))
    question_emb = torch.from_numpy(Embedder(embed_model).encode([q.question for q in questions]))  # (Q, d)

    rows = {}
    for name, (w, b) in {
        "untrained": (1.0, settings.dense_weight),
        "learned w, b": (learned["w"], learned["b"]),
    }.items():
        prior = EntityPrior(settings)
        with torch.no_grad():
            prior.weight.fill_(w)
            prior.dense_weight.fill_(b)
            ranked = []
            for start in range(0, len(questions), args.batch):
                chunk = questions[start : start + args.batch]
                logits = prior.on_walk(kg.walk, seed_weights(index, [q.id for q in chunk]))  # (b, E)
                emb = question_emb[start : start + len(chunk)]
                scores = passage_logits(logits, kg.passage_entities, prior.dense_weight, emb, kg.passage_emb)
                ranked.extend(top_k_stable(scores.numpy(), 5)[0])
        ids = [[index.passage_ids[p] for p in row] for row in ranked]
        pairs = list(zip(ids, questions, strict=True))
        recall = {f"recall@{k}": 100 * np.mean([recall_at_k(r, q.supporting, k) for r, q in pairs]) for k in (2, 5)}
        rows[name] = {"w": w, "b": b, **{key: float(value) for key, value in recall.items()}}
    print(json.dumps({"checkpoint": args.checkpoint, "data": args.data, "questions": len(questions), **rows}, indent=1))


if __name__ == "__main__":
    main()
