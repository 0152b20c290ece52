"""The one interface every language-model backend implements, and the usage counter behind it.

A method receives an :class:`LLM` (never builds one itself) and calls :meth:`LLM.generate`; every
generation is counted into ``llm.usage`` under the current tag (:class:`Usage` lists what is counted)::

    with llm.track("dtkg", question.id):
        answer = llm.generate([[{"role": "user", "content": prompt}]], max_new_tokens=64)[0].text
    llm.usage.by_question("dtkg")[question.id].generated_tokens

A job may install a :func:`failure_budget`, so a run against a dead server ends in seconds.
"""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Message = dict[str, str]
"""A chat message: ``{"role": "system" | "user" | "assistant", "content": str}``."""
Prompt = str | list[Message]
"""A plain text prompt (completed as is) or a chat (formatted with the model's chat template)."""

UNTAGGED = "untagged"
LLM_FAILURES = "llm_failures"
LLM_RETRIES = "llm_retries"


class LLMError(RuntimeError):
    """A model could not answer (server unreachable, error status, malformed answer)."""

    def __init__(self, message: str, retries: int = 0) -> None:
        super().__init__(message)
        self.retries = retries


class LLMBudgetExceeded(LLMError):
    """More generate calls failed than the job's :func:`failure_budget` allows."""


class FailureBudget:
    """At most ``max_failures`` failed generate calls in this process (None: no limit); thread-safe.

    Once more calls have failed, every further call raises :class:`LLMBudgetExceeded` at once, so a run
    against a dead server ends in seconds (scoring the rest as failed) instead of retrying every question.
    """

    def __init__(self, max_failures: int | None) -> None:
        self.max_failures = max_failures
        self.failures = 0
        self._lock = threading.Lock()

    @property
    def exceeded(self) -> bool:
        return self.max_failures is not None and self.failures > self.max_failures

    def fail(self) -> bool:
        """Count one failure; True when that exceeds the budget."""
        with self._lock:
            self.failures += 1
            return self.exceeded


_BUDGET: FailureBudget | None = None


@contextmanager
def failure_budget(max_failures: int | None) -> Iterator[FailureBudget]:
    """Install a :class:`FailureBudget` for every LLM of this process while the block runs."""
    global _BUDGET
    outer, _BUDGET = _BUDGET, FailureBudget(max_failures)
    try:
        yield _BUDGET
    finally:
        _BUDGET = outer


@dataclass
class Generation:
    """One completion and what it cost."""

    text: str
    prompt_tokens: int
    generated_tokens: int
    finish_reason: Literal["stop", "length"] = "stop"
    """``stop``: an end-of-sequence token or a stop string; ``length``: ``max_new_tokens`` ran out."""
    seconds: float = 0.0
    """Time spent on this generation (a batch's time is split evenly over its prompts); 0 for a cache hit."""
    cached: bool = False
    """True when the on-disk response cache answered."""


COST_FIELDS = ("calls", "prompt_tokens", "generated_tokens", "seconds")
"""The :class:`Usage` fields reported as LLM cost, as DTKG Table 6 and HyperAddress Fig. 5 compare methods
by calls, tokens and time."""


@dataclass
class Usage:
    """Counts of one tag ``(method, question_id)``, or a sum of tags.

    - ``calls``: generations asked for, cache hits included, so calls and tokens are the method's own
      cost whatever the cache holds;
    - ``cache_hits``: how many of those the on-disk response cache answered;
    - ``prompt_tokens`` / ``generated_tokens``: as the backend (or server) tokenised them;
    - ``seconds``: time spent waiting on a model (cache hits cost 0);
    - ``events``: named fallbacks such as ``json_repaired`` / ``json_fallback`` (:mod:`glmrag.llm.parse`),
      ``llm_failures`` (generate calls that raised :class:`LLMError`) and ``llm_retries`` (requests an
      HTTP backend sent again).
    """

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    events: dict[str, int] = field(default_factory=dict)

    def add(self, other: Usage) -> Usage:
        """Add ``other`` into this one, in place; returns self."""
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.prompt_tokens += other.prompt_tokens
        self.generated_tokens += other.generated_tokens
        self.seconds += other.seconds
        for name, n in other.events.items():
            self.events[name] = self.events.get(name, 0) + n
        return self

    def since(self, before: Usage | None) -> Usage:
        """``self - before`` field by field: what a counter that outlives one run counted during that run."""
        if before is None:
            return Usage().add(self)
        events = {k: n - before.events.get(k, 0) for k, n in self.events.items() if n != before.events.get(k, 0)}
        return Usage(
            self.calls - before.calls,
            self.cache_hits - before.cache_hits,
            self.prompt_tokens - before.prompt_tokens,
            self.generated_tokens - before.generated_tokens,
            self.seconds - before.seconds,
            events,
        )

    def as_dict(self) -> dict:
        return asdict(self)

    def cost(self) -> dict[str, float]:
        """The :data:`COST_FIELDS` counts, as a plain dict."""
        return {name: getattr(self, name) for name in COST_FIELDS}


# (method, question_id) of the code running now; None before any ``track``. Threads start
# with an empty context, so a worker thread that generates calls ``track`` itself.
_TAG: ContextVar[tuple[str, str | None] | None] = ContextVar("glmrag_llm_tag", default=None)


class UsageCounter:
    """Thread-safe counts of generations and fallbacks, per ``(method, question_id)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_tag: dict[tuple[str, str | None], Usage] = {}

    @contextmanager
    def track(self, method: str | None = None, question_id: str | None = None) -> Iterator[None]:
        """Count what runs inside under ``(method, question_id)``; a None keeps the enclosing tag's value."""
        outer = _TAG.get() or (UNTAGGED, None)
        tag = (method if method is not None else outer[0], question_id if question_id is not None else outer[1])
        token = _TAG.set(tag)
        try:
            yield
        finally:
            _TAG.reset(token)

    @staticmethod
    def current_tag() -> tuple[str, str | None]:
        return _TAG.get() or (UNTAGGED, None)

    def _usage(self, tag: tuple[str, str | None]) -> Usage:
        return self._by_tag.setdefault(tag, Usage())

    def record(self, generation: Generation) -> None:
        """Count one generation under the current tag."""
        with self._lock:
            u = self._usage(self.current_tag())
            u.calls += 1
            u.cache_hits += int(generation.cached)
            u.prompt_tokens += generation.prompt_tokens
            u.generated_tokens += generation.generated_tokens
            u.seconds += generation.seconds

    def count(self, event: str, n: int = 1) -> None:
        """Count a named event (a fallback, a repair) under the current tag."""
        with self._lock:
            events = self._usage(self.current_tag()).events
            events[event] = events.get(event, 0) + n

    def get(self, method: str, question_id: str | None = None) -> Usage:
        """The counts of one tag (zeros when nothing ran under it)."""
        with self._lock:
            return Usage().add(self._by_tag.get((method, question_id), Usage()))

    def total(self) -> Usage:
        with self._lock:
            out = Usage()
            for u in self._by_tag.values():
                out.add(u)
            return out

    def by_method(self) -> dict[str, Usage]:
        """Counts summed over questions, per method."""
        with self._lock:
            out: dict[str, Usage] = {}
            for (method, _), u in self._by_tag.items():
                out.setdefault(method, Usage()).add(u)
            return out

    def by_question(self, method: str) -> dict[str | None, Usage]:
        """Counts of one method, per question id (None: work done outside any question)."""
        with self._lock:
            return {q: Usage().add(u) for (m, q), u in self._by_tag.items() if m == method}

    def rows(self) -> list[dict]:
        """One flat dict per tag, for a report table or JSON."""
        with self._lock:
            return [
                {"method": m, "question_id": q} | u.as_dict()
                for (m, q), u in sorted(self._by_tag.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
            ]

    def reset(self) -> None:
        with self._lock:
            self._by_tag.clear()


def check_prompts(prompts: Sequence[Prompt]) -> list[Prompt]:
    """Validate the prompts of :meth:`LLM.generate`; the error names the prompt and the fix."""
    if isinstance(prompts, str) or (prompts and isinstance(prompts[0], dict)):
        raise TypeError("generate() takes a list of prompts: wrap one prompt (or one chat) as [prompt]")
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            continue
        if not isinstance(p, list) or not p:
            raise TypeError(f"prompt {i} is {type(p).__name__}; expected a str or a non-empty list of chat messages")
        for j, m in enumerate(p):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise TypeError(
                    f"prompt {i}, message {j} is {m!r}; expected {{'role': 'user', 'content': '...'}} with str values"
                )
    return list(prompts)


def truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop string (OpenAI semantics: the stop string is not returned)."""
    cut = min((i for s in stop if s and (i := text.find(s)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class LLM(ABC):
    """A text generator. Subclasses implement :meth:`_generate`; this class validates and counts."""

    name: str

    def __init__(self, usage: UsageCounter | None = None) -> None:
        self.usage = usage if usage is not None else UsageCounter()

    def track(self, method: str | None = None, question_id: str | None = None):
        """Shorthand for ``self.usage.track(method, question_id)``."""
        return self.usage.track(method, question_id)

    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        stop: str | Sequence[str] | None = None,
    ) -> list[Generation]:
        """One :class:`Generation` per prompt, in order.

        ``temperature`` 0 is greedy decoding; ``stop`` strings end a generation and are cut from its text.
        """
        prompts = check_prompts(prompts)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens is {max_new_tokens}; expected at least 1")
        if temperature < 0:
            raise ValueError(f"temperature is {temperature}; expected 0 (greedy) or more")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if not prompts:
            return []
        budget = _BUDGET
        if budget is not None and budget.exceeded:
            self.usage.count(LLM_FAILURES)
            raise LLMBudgetExceeded(
                f"{budget.failures} LLM calls failed, more than max_llm_failures={budget.max_failures}; "
                "not calling the model again in this run"
            )
        try:
            out = self._generate(prompts, max_new_tokens, float(temperature), stops)
        except LLMError as err:
            self.usage.count(LLM_FAILURES)
            if err.retries:
                self.usage.count(LLM_RETRIES, err.retries)
            if budget is not None and budget.fail():
                raise LLMBudgetExceeded(
                    f"{budget.failures} LLM calls failed, more than max_llm_failures={budget.max_failures} "
                    f"(last: {err})"
                ) from err
            raise
        if len(out) != len(prompts):
            raise RuntimeError(f"{type(self).__name__} returned {len(out)} generations for {len(prompts)} prompts")
        for g in out:
            self.usage.record(g)
        return out

    def complete(self, prompt: Prompt, max_new_tokens: int = 256, **kwargs) -> str:
        """The text of one generation."""
        return self.generate([prompt], max_new_tokens=max_new_tokens, **kwargs)[0].text

    @abstractmethod
    def _generate(
        self, prompts: list[Prompt], max_new_tokens: int, temperature: float, stop: list[str]
    ) -> list[Generation]: ...


def build_llm(spec: LLM | Mapping[str, Any]) -> LLM:
    """``spec`` itself when it is an :class:`LLM`, else the LLM a config mapping describes:
    ``{"_target_": "glmrag.llm.local.LocalLLM", **keyword arguments}`` (the form of ``configs/llm/*.yaml``).

    Lower floors build the LLM of a plain mapping with this instead of Hydra's ``instantiate``; the target must
    be a subclass of :class:`LLM`.
    """
    if isinstance(spec, LLM):
        return spec
    kwargs = dict(spec)
    target = kwargs.pop("_target_", None)
    if not isinstance(target, str) or "." not in target:
        raise ValueError(f"an LLM config needs _target_: <module>.<LLM class> (configs/llm/*.yaml), got {target!r}")
    module, _, name = target.rpartition(".")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, LLM)):
        raise ValueError(f"_target_ {target!r} is not an LLM class (a subclass of glmrag.llm.base.LLM)")
    return cls(**kwargs)
