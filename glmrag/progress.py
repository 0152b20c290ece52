"""Progress of the long stages: a bar on a terminal, a line every few seconds in a log, nothing when quiet.

``for x in progress(items, "spaCy extraction", unit="passage"): ...`` shows a tqdm bar (count, rate,
time left) when stderr is a terminal. Otherwise (a log file, a batch job) it logs an INFO line every
:data:`LOG_EVERY_S` seconds while the stage runs, from a timer thread so that one slow piece still
reports, and a summary line when it ends. Work in uneven pieces reports its units through
:func:`stage_progress`. ``GLMRAG_QUIET=1`` (or :func:`set_quiet`) turns both off;
:func:`quiet_third_party` lowers the INFO chatter of the libraries the jobs use to WARNING.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tqdm.auto import tqdm

log = logging.getLogger(__name__)

QUIET_ENV = "GLMRAG_QUIET"
LOG_EVERY_S = 15.0
"""Seconds between two progress lines of a running stage in a log (a newcomer's run is never silent for 30 s)."""
THIRD_PARTY = ("httpx", "httpcore", "urllib3", "sentence_transformers", "transformers", "datasets", "filelock")
"""Loggers whose INFO lines (a request per call, a model load) drown the jobs' own."""

T = TypeVar("T")
_quiet: bool | None = None


def set_quiet(quiet: bool = True) -> None:
    """No bars and no stage lines from now on (``quiet=False``: back to ``$GLMRAG_QUIET``)."""
    global _quiet
    _quiet = quiet or None


def is_quiet() -> bool:
    return bool(_quiet) or os.environ.get(QUIET_ENV, "") not in ("", "0", "false")


def progress(items: Iterable[T], stage: str, total: int | None = None, unit: str = "item") -> Iterator[T]:
    """Yield ``items``, showing the stage's progress (see the module docstring)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with stage_progress(stage, total, unit) as advance:
        for item in items:
            advance()
            yield item


@contextmanager
def stage_progress(stage: str, total: int | None = None, unit: str = "item") -> Iterator[Callable[[int], None]]:
    """A stage whose work comes in uneven pieces: ``with stage_progress("embedding", 5000, "phrase") as advance:``
    then ``advance(n)`` after each piece of ``n`` units; bar and lines as for :func:`progress`. A stage that
    cannot count (``total`` None and no ``advance``) still logs that it is running."""
    quiet = is_quiet()
    on_terminal = sys.stderr.isatty()
    count = 0

    def advance(n: int = 1) -> None:
        nonlocal count
        count += n
        bar.update(n)

    start = time.perf_counter()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(LOG_EVERY_S):
            log.info("%s", running_line(stage, count, total, unit, time.perf_counter() - start))

    ticker = threading.Thread(target=heartbeat, name=f"progress: {stage}", daemon=True)
    with tqdm(desc=stage, total=total, unit=unit, disable=quiet or not on_terminal, leave=False) as bar:
        if not quiet and not on_terminal:
            ticker.start()
        try:
            yield advance
        finally:
            done.set()
            if ticker.is_alive():
                ticker.join()
    if not quiet:
        log.info("%s", stage_line(stage, count, unit, time.perf_counter() - start))


def _plural(unit: str, count: int) -> str:
    if count == 1:
        return unit
    return f"{unit[:-1]}ies" if unit.endswith("y") and unit[-2:-1] not in "aeiou" else f"{unit}s"


def _duration(seconds: float) -> str:
    """``41 s``, ``5 min 11 s``, ``83 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def running_line(stage: str, count: int, total: int | None, unit: str, seconds: float) -> str:
    """``stage: 4096/19102 phrases (21%) in 85 s, 48.2 phrase/s, ~5 min 11 s left``; without a count or total,
    what is known of it."""
    if count == 0:
        of = f" of {total} {_plural(unit, total)}" if total else ""
        return f"{stage}: running for {_duration(seconds)}{of}"
    rate = count / seconds if seconds > 0 else 0.0
    if not total:
        return f"{stage}: {count} {_plural(unit, count)} in {_duration(seconds)}, {rate:.1f} {unit}/s"
    left = f", ~{_duration((total - count) / rate)} left" if rate > 0 else ""
    done = f"{count}/{total} {_plural(unit, total)} ({100 * count / total:.0f}%)"
    return f"{stage}: {done} in {_duration(seconds)}, {rate:.1f} {unit}/s{left}"


def stage_line(stage: str, count: int, unit: str, seconds: float) -> str:
    """``stage: 1890 passages in 41.2 s (45.9 passage/s)``."""
    rate = f" ({count / seconds:.1f} {unit}/s)" if seconds > 0 else ""
    return f"{stage}: {count} {_plural(unit, count)} in {seconds:.1f} s{rate}"


def quiet_third_party(level: int = logging.WARNING) -> None:
    """Set the loggers of :data:`THIRD_PARTY` to ``level``; off a terminal, also turn off the Hugging Face
    libraries' own bars ("Loading weights"), which a log file gets as lines of control characters."""
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(level)
    if not sys.stderr.isatty():
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when huggingface_hub is imported
        if "huggingface_hub" in sys.modules:
            sys.modules["huggingface_hub"].utils.disable_progress_bars()
        if "transformers" in sys.modules:  # it read the setting above when it was imported
            sys.modules["transformers"].utils.logging.disable_progress_bar()
