"""Exact mid-epoch resume: the training loader's position and every rank's random streams, in the checkpoint.

Lightning saves the ``state_dict`` of a training DataLoader that has one (``fit_loop.combined_loader``) and hands
it back before it iterates the loader of a resumed fit. :class:`ResumableLoader` is such a loader: its state is
``(epoch, batches)``: the epoch its sampler is in and the batches of it the fit loop has trained on (read from
the loop, not counted at the iterator: Lightning fetches one batch ahead), and its :class:`ResumableSampler` skips those
batches once, in index space, before any record is read or collated. The loop's own counters, already in the
checkpoint, then carry on from the same step.

The same batches are half of an exact resume; the other half is the random state of each rank at the step the
run stopped (T5's dropout draws from torch's global generator, per rank). :func:`random_streams` gathers every
rank's Python, NumPy, torch and CUDA states into the checkpoint (:data:`RANDOM_STREAMS_KEY`);
:func:`restore_random_streams` puts this rank's back, called right before the first resumed training step
(:class:`~glmrag.models.retriever_module.RetrieverModule`). The loaders draw their worker seeds from their own
generator (seeded by the run's seed and the epoch), so building a loader's iterator, which a resumed fit does
at another moment than an uninterrupted one, takes nothing from the global streams.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

log = logging.getLogger(__name__)

RANDOM_STREAMS_KEY = "glmrag_random_streams"
"""Checkpoint entry: one dict of random states per DDP rank, in rank order (:func:`random_streams`)."""


class ResumableSampler:
    """A sampler of whole batches that can start its next pass ``batches`` into ``epoch`` (a mixin).

    The class that mixes it in has ``epoch`` (a :class:`~torch.utils.data.DistributedSampler`) and calls
    :meth:`first_batch` once at the start of each pass, then yields from there.
    """

    epoch: int
    _resume_at: tuple[int, int] | None = None

    def resume_at(self, epoch: int, batches: int) -> None:
        """Make the next pass start at batch ``batches`` when it is a pass over ``epoch`` (else at 0)."""
        if epoch < 0 or batches < 0:
            raise ValueError(f"a resume position is (epoch >= 0, batches >= 0), got ({epoch}, {batches})")
        self._resume_at = (int(epoch), int(batches))

    def first_batch(self) -> int:
        """Where this pass starts: the resumed position once, in its own epoch; batch 0 otherwise."""
        resume, self._resume_at = self._resume_at, None
        return resume[1] if resume is not None and resume[0] == self.epoch else 0


class ResumableLoader(DataLoader):
    """A DataLoader over a :class:`ResumableSampler` whose ``state_dict`` Lightning stores in the checkpoint.

    ``trained()`` returns how many batches of the sampler's epoch the fit has trained on, read from the trainer
    by the DataModule (:func:`trained_batches`); without it (a loader outside a fit) the state says 0.
    ``seed`` seeds the loader's own generator, reseeded with the epoch at each pass, so worker seeds do not
    depend on when the iterator was built. Other keyword arguments are the DataLoader's.
    """

    def __init__(
        self,
        dataset: Any,
        sampler: ResumableSampler,
        trained: Callable[[], int] | None = None,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        if not isinstance(sampler, ResumableSampler):
            raise TypeError(f"ResumableLoader needs a ResumableSampler, got {type(sampler).__name__}")
        super().__init__(dataset, sampler=sampler, generator=torch.Generator(), **kwargs)
        self.trained, self.seed = trained, seed

    def __iter__(self) -> Iterator[Any]:
        self.generator.manual_seed(int(np.random.SeedSequence([self.seed, self.sampler.epoch]).generate_state(1)[0]))
        return super().__iter__()

    def state_dict(self) -> dict[str, int]:
        """``{"epoch", "batches"}``: the sampler's epoch (the one whose batches the fit trains on; after a fit's
        last epoch still that epoch, so a resume with more epochs skips nothing) and its batches trained on."""
        return {"epoch": int(self.sampler.epoch), "batches": int(self.trained()) if self.trained is not None else 0}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Skip the trained batches of the saved epoch in the next pass, and be in that epoch already: Lightning
        calls this, then creates the iterator (whose workers start prefetching), and only then ``set_epoch``."""
        if set(state_dict) != {"epoch", "batches"}:
            raise ValueError(f"a training loader state is {{'epoch', 'batches'}}, the checkpoint holds {state_dict}")
        self.sampler.set_epoch(state_dict["epoch"])
        self.sampler.resume_at(state_dict["epoch"], state_dict["batches"])


def load_pending_loader_state(trainer: Any) -> bool:
    """Hand a resumed fit's training loader its saved state when Lightning has not; True if it had not.

    Lightning loads the saved loader state when the fit loop builds the training loader, after it restored the
    checkpoint. A module whose ``configure_optimizers`` asks ``trainer.estimated_stepping_batches`` (a
    :class:`~glmrag.models.retriever_module.StepSchedule`) makes it build the loader earlier, before the restore,
    and then the state is kept but never loaded: the resumed epoch starts again at its first batch
    (Lightning-AI/pytorch-lightning#20550, open in 2.6). Called at ``on_train_start``, after the restore and
    before the first batch, this loads the state and makes the fit loop's iterator anew, as the fit loop does
    itself when it builds the loader after the restore.
    """
    fit_loop = trainer.fit_loop
    if not (fit_loop.restarting and getattr(fit_loop, "_combined_loader_states_to_load", None)):
        return False
    fit_loop._load_combined_loader_states()
    iter(fit_loop._data_fetcher)
    return True


def trained_batches(trainer: Any) -> Callable[[], int]:
    """``() -> int``: the batches of ``trainer``'s current training epoch whose training step ran (``processed``:
    a checkpoint saved in ``on_train_batch_end`` has not yet counted its batch completed)."""
    return lambda: trainer.fit_loop.epoch_loop.batch_progress.current.processed


def _own_streams() -> dict[str, Any]:
    """This process's random states as plain values (``torch.load(weights_only=True)`` reads them back)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
    }


def random_streams() -> list[dict[str, Any]]:
    """Every rank's random states, in rank order (a collective under DDP: every rank must call it, as every
    rank calls ``trainer.save_checkpoint``)."""
    own = _own_streams()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [own]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, own)
    return gathered


def restore_random_streams(streams: list[dict[str, Any]], rank: int) -> bool:
    """Set this process's random states to ``streams[rank]`` (:func:`random_streams` of the saved run); False,
    with a warning and nothing set, when the checkpoint holds no state of ``rank`` (saved on fewer devices)."""
    if not 0 <= rank < len(streams):
        log.warning(
            "the checkpoint holds the random states of %d rank(s), none of rank %d: it was saved on fewer devices, "
            "so this rank's dropout draws differ from the saved run's; resume on the devices it trained on for an "
            "exact resume",
            len(streams),
            rank,
        )
        return False
    state = streams[rank]
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    return True
