"""HyperAddress (Read the Route): a walk on the description-labelled hypergraph, steered by a reader.

One concept per module: :mod:`.retriever` (the :class:`HyperAddressRetriever`: restart from the
question's descriptions and the walk, §4.1-4.2), :mod:`.llm_descriptions` (incidence labels written by
an LLM, §4.1), :mod:`.reader_pointers` (a reader's addressing-head pointer scores, §3),
:mod:`.addressing_heads` (selecting those heads on unlabeled probes, §3, App. A.2), :mod:`.steering`
(the steered rounds, §4.2) and :mod:`.rewrite` (question rewriting between rounds, §4.2, App. A).
"""

from glmrag.retrievers.hyperaddress.llm_descriptions import LLMDescriber
from glmrag.retrievers.hyperaddress.reader_pointers import Reader
from glmrag.retrievers.hyperaddress.retriever import (
    HyperAddressRetriever,
    HyperWalk,
    NameDescriber,
    hyper_walk,
    hypergraph_pagerank,
)
from glmrag.retrievers.hyperaddress.steering import Steering

__all__ = [
    "HyperAddressRetriever",
    "HyperWalk",
    "LLMDescriber",
    "NameDescriber",
    "Reader",
    "Steering",
    "hyper_walk",
    "hypergraph_pagerank",
]
