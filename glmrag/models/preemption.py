"""A resumable checkpoint when a scheduler stops the run: SIGTERM, or SLURM's requeue that follows SIGUSR1.

Lightning's signal connector turns SIGTERM into :class:`SIGTERMException` at the next batch on every rank;
this callback then writes the whole training state (weights, optimizer, loops, the checkpoint callbacks'
best scores) as ``<dirpath>/last.ckpt``, so ``ckpt_path=last`` resumes at the same global step. SLURM's
SIGUSR1 is Lightning's own: :class:`~lightning.fabric.plugins.environments.SLURMEnvironment` (auto-requeue)
writes ``hpc_ckpt_<n>.ckpt`` in ``trainer.default_root_dir`` and requeues the job.
"""

from __future__ import annotations

import logging
import os

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)


class PreemptionCheckpoint(Callback):
    """``<dirpath>/<filename>.ckpt`` at a SIGTERM during ``fit``, written beside it and renamed.

    Other exceptions write nothing (the state of a step that crashed is no state to resume from), and a
    SIGTERM during ``test`` neither: the module then holds the best epoch's weights, not the last ones.
    A plain callback, not an :class:`~lightning.pytorch.callbacks.OnExceptionCheckpoint`: with one of those
    among the callbacks, Lightning resumes every ``fit(ckpt_path=None)`` from the folder's last checkpoint,
    and it deletes its file when the run ends.
    """

    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "last") -> None:
        super().__init__()
        if not filename:
            raise ValueError("PreemptionCheckpoint needs a file name")
        self.dirpath, self.filename = dirpath, filename

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.dirpath, f"{self.filename}.ckpt")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != TrainerFn.FITTING:
            return
        partial = f"{self.ckpt_path}.partial"
        trainer.save_checkpoint(partial)  # rank 0 writes; every rank waits for it
        if trainer.is_global_zero:
            os.replace(partial, self.ckpt_path)  # a kill while writing leaves the previous last.ckpt whole
            log.warning("SIGTERM at global step %d: saved %s", trainer.global_step, self.ckpt_path)
