"""The GLM's defaults on three choices GLM-RAG leaves open, checked against the GLM authors' rules.

Plenz & Frank, "Graph Language Models" (ACL 2024), public code ``wrapper_functions.py``: the last triple
writes a token pair's relative position (parallel and reciprocal edges, self-loops), the appended text is
tokenised with its ``</s>``, and the extra buckets are rows of T5's bias table (trained with T5). The
position rules and T5's bucket formula are written out here (``reference_positions.py``, :func:`t5_bucket`),
independent of glmrag's code, and compared bucket by bucket with what the GLM encoder reads.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import T5Config

from glmrag.data.types import Question
from glmrag.datamodules.glm_inputs import GLMCollate, SubgraphSettings, load_tokenizer, question_record
from glmrag.graph.levi import layout_triples
from glmrag.index.embed import DEFAULT_MODEL
from glmrag.models.glm_module import GLMRetrieverModule
from glmrag.nn.glm import T5GLMEncoder

sys.path.insert(0, str(Path(__file__).parents[1] / "graph"))
from reference_positions import reference_glm_positions  # noqa: E402

NUM_BUCKETS, MAX_DISTANCE = 32, 128  # T5's relative_attention_num_buckets / _max_distance
T5_TINY = {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 4, "d_kv": 8, "dropout_rate": 0.0}
# Multi-token phrases, a parallel edge (paris -> france twice), a reciprocal edge (france -> paris) and a
# self-loop (paris -> paris), so that every conflict the rules settle differently occurs.
TRIPLES = [
    ("paris", "is the capital city of", "france"),
    ("paris", "located in", "france"),
    ("france", "has the capital", "paris"),
    ("paris", "is twinned with", "paris"),
    ("france", "is located in", "western europe"),
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(DEFAULT_MODEL)


def t5_bucket(position: int) -> int:
    """T5's bidirectional bucket of key - query (Raffel et al. 2020; HF ``_relative_position_bucket``)."""
    half = NUM_BUCKETS // 2
    bucket = half if position > 0 else 0
    distance = abs(position)
    exact = half // 2
    if distance < exact:
        return bucket + distance
    log_bucket = exact + int(math.log(distance / exact) / math.log(MAX_DISTANCE / exact) * (half - exact))
    return bucket + min(log_bucket, half - 1)


def reference_buckets(position: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Positioned pairs (kinds 0, 4) read T5's bucket; graph-global, text->graph, graph->text the extra
    buckets 32, 33, 34 (GLM-RAG App. B.1: global GLM with FullyConnected, three additional buckets)."""
    out = np.empty(position.shape, dtype=np.int64)
    for (i, j), k in np.ndenumerate(kind):
        out[i, j] = t5_bucket(int(position[i, j])) if k in (0, 4) else NUM_BUCKETS + int(k) - 1
    return out


def test_glm_reads_the_reference_buckets_on_reciprocal_edges_and_self_loops(tok):
    layout = layout_triples(TRIPLES, tok, question="what is the capital of france", question_eos=True)
    batch = GLMCollate()([_record_of(layout)])  # the default collate: position_conflict="last"
    torch.manual_seed(0)
    encoder = T5GLMEncoder.from_config(T5Config(vocab_size=tok.vocab_size, **T5_TINY))
    bias = encoder.attention_bias(batch["token_mask"], batch["relative_position"], batch["kind"])
    assert bias.bucket.dtype == torch.int8
    n = len(layout.input_ids)
    got = bias.bucket[0, :n, :n].long().numpy()
    expected = reference_buckets(*reference_glm_positions(layout))
    differ = np.argwhere(got != expected)
    assert not len(differ), f"{len(differ)} pairs differ, first (query, key) {differ[:5].tolist()}"
    # The case is built to tell the rules apart: the old rule ("nearest") reads other buckets.
    old = GLMCollate(position_conflict="nearest")([_record_of(layout)])
    old_bucket = encoder.attention_bias(batch["token_mask"], old["relative_position"], old["kind"]).bucket
    assert (old_bucket[0, :n, :n].long().numpy() != expected).any()


def _record_of(layout) -> dict:
    return {
        "kg": "toy",
        "question_id": "q",
        "input_ids": layout.input_ids,
        "node_of_token": layout.node_of_token,
        "entity_of_node": layout.entity_of_node,
        "triple_nodes": layout.triple_nodes.reshape(-1),
        "num_question_tokens": layout.num_question_tokens,
        "linear": False,
        "target_nodes": np.zeros(0, dtype=np.int64),
        "gold": [],
        "question_emb": np.zeros(4, dtype=np.float32),
    }


def test_the_stored_question_ends_with_the_end_of_sequence_token(kg, tok):
    index = kg([(0, 0, 1)], 2, passages=[[0], [1]], links={"q1": [0]})
    question = Question("q1", "who is e0", ("e1",), ("p1",))
    record = question_record(index, question, "toy", tok, SubgraphSettings(), np.zeros(4, np.float32))
    words = tok("who is e0", add_special_tokens=False)["input_ids"]
    # MiniLM has no eos token: its end-of-sequence marker is [SEP]; T5's tokenizer would give </s>.
    end = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    assert record["num_question_tokens"] == len(words) + 1
    assert list(record["input_ids"][-len(words) - 1 :]) == [*words, end]
    off = question_record(index, question, "toy", tok, SubgraphSettings(question_eos=False), np.zeros(4, np.float32))
    assert list(off["input_ids"][-len(words) :]) == words and off["num_question_tokens"] == len(words)
    assert SubgraphSettings().key() != SubgraphSettings(question_eos=False).key()  # separate shard caches


@pytest.mark.parametrize(("bucket_lr", "group"), [("backbone", "backbone"), ("head", "head")])
def test_extra_buckets_train_at_the_backbone_rate_by_default(bucket_lr, group):
    torch.manual_seed(0)
    glm, lr = {"encoder_config": T5_TINY, "tokenizer": DEFAULT_MODEL}, {"head": 5e-4, "backbone": 1e-4}
    model = GLMRetrieverModule(glm=glm, lr=lr if bucket_lr == "backbone" else lr | {"buckets": "head"})
    groups = {g["name"]: g for g in model.configure_optimizers()["optimizer"].param_groups}
    holder = [name for name, g in groups.items() if any(p is model.net.encoder.extra_bias for p in g["params"])]
    assert holder == [group]
    assert groups[group]["lr"] == {"backbone": 1e-4, "head": 5e-4}[group]
    ids = [id(p) for g in groups.values() for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
