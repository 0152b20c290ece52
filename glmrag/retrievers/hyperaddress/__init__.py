"""HyperAddress (Read the Route): a walk on the description-labelled hypergraph, steered by a reader.

One concept per module: :mod:`.settings` (the walk's and the steering's constants), :mod:`.retriever` (the
:class:`HyperAddressRetriever`: the question's restart and the walk, §4.1-4.2), :mod:`.llm_descriptions`
(incidence labels written by an LLM, §4.1), :mod:`.reader_pointers` (a reader's addressing-head pointer
scores, §3), :mod:`.addressing_heads` (selecting those heads on unlabeled probes, §3, App. A.2),
:mod:`.steering` (the steered rounds, §4.2) and :mod:`.rewrite` (question rewriting between rounds, App. A).
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
from glmrag.retrievers.hyperaddress.settings import HyperAddressSettings, SteeringSettings
from glmrag.retrievers.hyperaddress.steering import Steering

__all__ = [
    "HyperAddressRetriever",
    "HyperAddressSettings",
    "HyperWalk",
    "LLMDescriber",
    "NameDescriber",
    "Reader",
    "Steering",
    "SteeringSettings",
    "hyper_walk",
    "hypergraph_pagerank",
]
