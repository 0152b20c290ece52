"""Reading structured answers out of model text, with a documented fallback that never raises.

Small models wrap JSON in code fences, add prose, leave trailing commas, write Python literals or stop
mid-object. :func:`parse_json` repairs those cases and otherwise returns the caller's default; either
way the outcome is counted under the current usage tag (when a counter is given): ``json_repaired`` (a
repair parsed), ``json_fallback`` (nothing parsed, or the wrong type: the default), and
``label_repaired`` / ``label_fallback`` for :func:`parse_choice`.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from collections.abc import Sequence
from typing import Any

from glmrag.llm.base import UsageCounter

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)(?:```|$)", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_CLOSERS = {"{": "}", "[": "]"}


def _first_block(text: str) -> str | None:
    """The first balanced ``{...}`` or ``[...]`` block; a block cut short is closed (truncated output)."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in _CLOSERS:
            stack.append(_CLOSERS[c])
        elif c in "}]":
            if not stack or stack[-1] != c:
                return text[start : i + 1]  # mismatched: let the parser decide
            stack.pop()
            if not stack:
                return text[start : i + 1]
    # Ran out of text inside the block: close the open string, drop a dangling separator, close the brackets.
    block = text[start:] + (quote or "")
    block = re.sub(r"[,:\s]+$", "", block)
    return block + "".join(reversed(stack))


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:  # Python literals: single quotes, True/False/None
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _candidates(text: str) -> list[str]:
    """Repairs to try, in order: fenced body, first block of it or of the text, each without trailing commas."""
    fenced = [m.group(1) for m in _FENCE.finditer(text)]
    out: list[str] = []
    for source in [*fenced, text]:
        block = _first_block(source)
        for c in (source.strip(), block):
            if c:
                out += [c, _TRAILING_COMMA.sub(r"\1", c)]
    return list(dict.fromkeys(out))


def parse_json(
    text: str | None,
    default: Any,
    counter: UsageCounter | None = None,
    expect: type | tuple[type, ...] | None = None,
) -> Any:
    """The JSON value in ``text``, repaired if need be; a copy of ``default`` when nothing parses.

    Never raises. ``expect`` (e.g. ``dict`` or ``list``) rejects a value of another type (counted as a
    fallback). Repairs, in order: strip code fences, take the first ``{...}`` / ``[...]`` block (closing
    one that was cut short), drop trailing commas, accept Python literals.
    """
    if isinstance(text, str) and text.strip():
        try:
            value = json.loads(text)
            if expect is None or isinstance(value, expect):
                return value
        except (ValueError, RecursionError):
            pass
        for candidate in _candidates(text):
            ok, value = _loads(candidate)
            if ok and (expect is None or isinstance(value, expect)):
                if counter is not None:
                    counter.count("json_repaired")
                return value
    if counter is not None:
        counter.count("json_fallback")
    return copy.deepcopy(default)


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def parse_choice(text: str | None, choices: Sequence[str], default: str, counter: UsageCounter | None = None) -> str:
    """One of ``choices`` read from ``text``; ``default`` when none is there. Never raises.

    An exact answer (case, spaces and punctuation aside) is taken as is; otherwise the choice that appears
    first in the text as a whole word is taken and counted as ``label_repaired``; otherwise ``default``,
    counted as ``label_fallback``.
    """
    if isinstance(text, str) and text.strip():
        said = _norm(text)
        for c in choices:
            if said == _norm(c):
                return c
        hits = [(m.start(), c) for c in choices if (m := re.search(rf"\b{re.escape(_norm(c))}\b", said))]
        if hits:
            if counter is not None:
                counter.count("label_repaired")
            return min(hits, key=lambda h: (h[0], -len(h[1])))[1]
    if counter is not None:
        counter.count("label_fallback")
    return default
