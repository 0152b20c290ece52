"""What the GPU step programs of ``gpu_check.sh`` share: a SIGTERM that saves what was measured, and errors
short enough for a step's JSON. Imported as ``gpu_common`` (the scripts run from this folder)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator


def error_text(err: BaseException) -> str:
    """The error and what caused it (dynamo's recompile limit, say), short enough for the JSON."""
    text = f"{type(err).__name__}: {err}"
    if err.__cause__ is not None:
        text += f" (caused by {type(err.__cause__).__name__}: {err.__cause__})"
    return text[:1500]


@contextlib.contextmanager
def stop_on_sigterm(on_stop: Callable[[int], None]) -> Iterator[None]:
    """Within the block, SIGTERM (``timeout`` in ``gpu_check.sh``) calls ``on_stop`` (which records and saves
    what is measured) and exits with 124; the previous handler is restored after the block."""

    def handler(signum: int, frame: object) -> None:
        on_stop(signum)
        raise SystemExit(124)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
