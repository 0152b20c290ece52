"""Fixtures of the nn tests: a deterministic stand-in for the sentence encoder and a graph factory."""

from __future__ import annotations

import pytest
import torch
import transformers
from stand_ins import HashEncoder

from glmrag.index.embed import DEFAULT_MODEL, resolve_model_path
from glmrag.nn.graph_inputs import GraphInputs, graph_inputs


@pytest.fixture
def hash_encoder() -> HashEncoder:
    return HashEncoder(16)


@pytest.fixture
def make_graph(hash_encoder):
    """Factory: ``make_graph(index, node_features=None) -> GraphInputs`` with 16-d hashed relation features."""

    def make(index, node_features: torch.Tensor | None = None) -> GraphInputs:
        graph = graph_inputs(index, hash_encoder, node_features=False)
        graph.node_features = node_features
        return graph

    return make


@pytest.fixture(autouse=True)
def one_thread():
    """Run these tiny models on one thread: on a shared, loaded CPU, thread hand-offs cost more than the maths."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tok():
    """The offline MiniLM (BERT uncased) tokenizer the GLM tests lay their graphs out with."""
    return transformers.AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
