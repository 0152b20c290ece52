"""DDP across the jobs of a Hydra run or multirun: the other ranks start as this job alone, and leave with it.

Lightning's subprocess launcher (``strategy: ddp``) restarts the script with ``sys.argv``: under
``train.py -m`` that is the whole sweep, so every rank would run every job. It also leaves ``LOCAL_RANK``,
``WORLD_SIZE`` and the process group behind, so the next job of the sweep believes its ranks were started
elsewhere and waits for them. :class:`JobDDPStrategy` starts each rank with this job's own overrides in
Hydra's run mode (its output folder, its ``run_id``), and :func:`job_processes` gives every job a clean
distributed state. torchrun and SLURM start the ranks themselves, so neither changes anything there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.strategies.launchers.subprocess_script import _SubprocessScriptLauncher

from glmrag.jobs.config_path import RUN_ID_ENV

LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", RUN_ID_ENV)
"""What a launching job sets in its own environment; put back as it was when the job ends."""


def rank_command(local_rank: int) -> tuple[list[str], str]:
    """The command and folder that start rank ``local_rank`` of the current Hydra job, and nothing else.

    The job's overrides (a multirun's swept values included) run in Hydra's run mode, in the job's own
    output folder; ``hydra.output_subdir=null``: only rank 0 writes the job's ``.hydra`` folder.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_original_cwd, to_absolute_path

    import __main__

    hydra = HydraConfig.get()
    script = (
        [sys.executable, to_absolute_path(sys.argv[0])]
        if __main__.__spec__ is None
        else [sys.executable, "-m", __main__.__spec__.name]
    )
    own = [f'hydra.run.dir="{hydra.runtime.output_dir}"', "hydra.output_subdir=null"]
    own.append(f"hydra.job.name={hydra.job.name}_ddp_rank_{local_rank}")  # one log file per rank
    return [*script, *hydra.overrides.task, *own], get_original_cwd()


class JobScriptLauncher(_SubprocessScriptLauncher):
    """Lightning's subprocess launcher, with each rank started by :func:`rank_command` under Hydra."""

    def _call_children_scripts(self) -> None:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():  # a script without Hydra: Lightning's own command
            return super()._call_children_scripts()
        self._check_can_spawn_children()
        self.procs = []
        env = self.cluster_environment
        os.environ |= {"MASTER_ADDR": env.main_address, "MASTER_PORT": str(env.main_port)}
        os.environ |= {"NODE_RANK": str(env.node_rank()), "LOCAL_RANK": str(env.local_rank())}
        os.environ["WORLD_SIZE"] = str(self.num_processes * self.num_nodes)
        for local_rank in range(1, self.num_processes):
            command, cwd = rank_command(local_rank)
            self.procs.append(subprocess.Popen(command, env=os.environ | {"LOCAL_RANK": str(local_rank)}, cwd=cwd))


class JobDDPStrategy(DDPStrategy):
    """``DDPStrategy`` whose launcher starts the other ranks as this Hydra job (see the module docstring)."""

    def _configure_launcher(self) -> None:
        super()._configure_launcher()
        if self._start_method == "popen":
            self._launcher = JobScriptLauncher(self.cluster_environment, self.num_processes, self.num_nodes)


@contextmanager
def job_processes(run_id: str) -> Iterator[None]:
    """The body of one training job: ``run_id`` for the ranks it starts; on leaving, the launch variables
    as they were before and no process group, so that the next job of a multirun starts its own ranks."""
    before = {name: os.environ.get(name) for name in LAUNCH_VARIABLES}
    os.environ[RUN_ID_ENV] = run_id
    try:
        yield
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
