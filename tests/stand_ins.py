"""Stand-ins the tests of several packages share (importable as ``stand_ins``: ``tests/`` is on the path)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from lightning.pytorch.callbacks import Callback, ModelCheckpoint


class HashEncoder:
    """Unit vectors seeded by a hash of each text: equal texts have cosine 1, others about 0; no model to load."""

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Shapes: texts (N,) -> (N, dim) float32, unit rows."""
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(-1, self.dim)


class ResumeProbe(Callback):
    """A callback for a job run as a subprocess (``+callbacks.probe._target_=stand_ins.ResumeProbe``): writes
    ``{"global_step", "best_model_score"}`` to ``path`` as JSON when training starts, after a resume has
    restored the loops and the checkpoint callbacks."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_start(self, trainer, pl_module) -> None:
        best = [cb.best_model_score for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint) and cb.monitor]
        record = {"global_step": trainer.global_step, "best_model_score": [float(b) for b in best if b is not None]}
        with open(self.path, "w") as f:
            json.dump(record, f)


class SigtermAfterStep(Callback):
    """A scheduler's preemption at a chosen step: the process sends itself SIGTERM after training step ``step``
    (-1: never), so Lightning's own handler stops it at the next batch. In a Trainer's callbacks, or in a job run
    as a subprocess (``+callbacks.stop._target_=stand_ins.SigtermAfterStep +callbacks.stop.step=N``)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def frozen_demo(tiny: str, tmp: Path, *extra: str) -> list[str]:
    """Overrides of a two-epoch GFM-RAG+ demo at learning rate 0 on the dataset ``tiny``, with its files under
    ``tmp``: the weights never move, so no epoch beats the untrained model or epoch 0."""
    return [
        "experiment=demo",
        f"data.name={tiny}",
        "model.gnn.hidden_channels=8",
        "model.gnn.num_layers=1",
        "model.optimizer.lr=0.0",
        "trainer.max_epochs=2",
        "logger=[csv]",
        "callbacks.rich_progress_bar=null",
        f"output_dir={tmp / 'out'}",
        f"results_dir={tmp / 'results'}",
        *extra,
    ]


def link_questions(index, seed_sets: Sequence[Sequence[int]]) -> list:
    """Questions ``q0, q1, ...`` linked in ``index`` to the entity ids of ``seed_sets`` (one set per question)."""
    from glmrag.data.types import Question
    from glmrag.index.kg import EntityLink

    questions = []
    for i, seeds in enumerate(seed_sets):
        index.question_links[f"q{i}"] = [EntityLink(f"m{s}", int(s), 1.0) for s in seeds]
        questions.append(Question(f"q{i}", f"question {i}", ("a",), ()))
    return questions
