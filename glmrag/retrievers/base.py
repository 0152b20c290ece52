"""The one protocol every retrieval method implements.

Dense, PPR, the trained GNN and GLM checkpoints, HyperAddress and DTKG all
return a :class:`Ranking` per question, so one evaluator measures them all on
the same questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

from glmrag.data.types import Corpus, Question
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import Ranking  # the protocol's result type (defined below the models floor)
from glmrag.llm.base import Usage


@runtime_checkable
class Retriever(Protocol):
    name: str

    def retrieve(self, questions: Sequence[Question], index: KGIndex, corpus: Corpus, top_k: int = 10) -> list[Ranking]:
        """Rank the corpus's passages for each question, best first: at least ``top_k`` of them
        per question when the corpus has that many. ``index`` was built from ``corpus``."""
        ...


@runtime_checkable
class AnsweringRetriever(Retriever, Protocol):
    """A retriever that also answers its questions (DTKG generates the answer from the facts it verified).

    ``answers`` maps question id -> predicted answer of the last :meth:`retrieve`; the evaluation job
    scores them with EM/F1 instead of running the QA reader on the ranking.
    """

    answers: dict[str, str]


@runtime_checkable
class LLMCostedRetriever(Retriever, Protocol):
    """A retriever that calls a language model (HyperAddress steering, DTKG).

    :meth:`llm_cost` returns, per question id of the last :meth:`retrieve`, the LLM usage
    (calls, prompt and generated tokens, seconds) spent on that question, as DTKG Table 6 and
    HyperAddress Fig. 5 compare cost; the evaluation job reports it per question and per method.
    """

    def llm_cost(self) -> dict[str, Usage]: ...


_Settings = TypeVar("_Settings")


def checked_settings(cls: type[_Settings], value: _Settings | None, owner: str, node: str, config: str) -> _Settings:
    """``value`` if it is a ``cls`` (None: ``cls()``); anything else is a TypeError naming the YAML node and the
    ``_target_`` that would build it, so a config that forgot the ``_target_`` fails at construction."""
    if value is None:
        return cls()
    if not isinstance(value, cls):
        raise TypeError(
            f"{owner}: settings is a {type(value).__name__}, not a {cls.__name__}; give the config's {node} node "
            f"`_target_: {cls.__module__.rsplit('.', 1)[0]}.{cls.__name__}` ({config})"
        )
    return value
