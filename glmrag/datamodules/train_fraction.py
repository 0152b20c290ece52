"""A share of the training questions (GLM-RAG App. C, Fig. 7 data scaling), drawn the same in every process."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from glmrag.data.types import Question


def check_train_fraction(fraction: float) -> float:
    """``fraction`` as a float in (0, 1], else a ValueError that says how to fix the config."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0.0 < fraction <= 1.0:
        raise ValueError(
            f"datamodule.train_fraction (configs/datamodule/*.yaml) must be a number in (0, 1], "
            f"got {fraction!r}; e.g. 0.25 trains on a quarter of the training questions, 1.0 on all of them"
        )
    return float(fraction)


def fraction_of(questions: Sequence[Question], fraction: float, seed: int) -> list[Question]:
    """``ceil(fraction * n)`` of the ``n`` questions (at least one), chosen by ``seed``, in their original order.

    Each question gets the rank of ``sha256(f"{seed}/{id}")``; the subset is the lowest ranks. Hence the
    draw is the same in every process and Python session (DDP ranks agree without communicating), a
    smaller fraction is a subset of a larger one with the same seed (GLM-RAG Fig. 7 grows one training
    set), and a question's membership depends on its id only, not on its position in the split.
    """
    fraction = check_train_fraction(fraction)
    if fraction == 1.0 or not questions:
        return list(questions)
    keep = max(1, math.ceil(fraction * len(questions) - 1e-9))  # 0.3 * 10 is 3.0000000000000004
    rank = sorted(range(len(questions)), key=lambda i: hashlib.sha256(f"{seed}/{questions[i].id}".encode()).digest())
    chosen = set(rank[:keep])
    return [q for i, q in enumerate(questions) if i in chosen]
