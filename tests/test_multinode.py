"""The commands of docs/clusters.md, composed with Hydra and turned into Trainers without launching.

Each command of that page is read from docs/clusters.md. Its overrides are composed as ``train.py`` would,
and its Trainer is built from ``cfg.trainer`` with ``accelerator="cpu"`` standing in for the GPUs
(the strategy, world size and cluster environment do not depend on the accelerator), under the
environment variables its launcher sets: torchrun's (``TORCHELASTIC_RUN_ID``, ``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``, ``GROUP_RANK``) or those of ``srun`` in the section's ``#SBATCH`` job. Nothing is
launched and no process group is created. The DataModule then splits the global batch with its own
:meth:`~glmrag.datamodules.kg_datamodule.KGDataModule.set_device_batch_size`.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import hydra
import pytest
from hydra import compose, initialize_config_dir
from lightning.fabric.plugins.environments import LightningEnvironment, SLURMEnvironment, TorchElasticEnvironment
from lightning.pytorch.strategies import DDPStrategy

from glmrag.datamodules.kg_sampler import KGBatchSampler
from glmrag.jobs.common import instantiate_datamodule

ROOT = Path(__file__).resolve().parents[1]
SECTION = ("# Several GPUs and nodes", "## Where to go next")
LAUNCH_VARS = re.compile(r"^(SLURM_|TORCHELASTIC_|WORLD_SIZE$|RANK$|LOCAL_RANK$|GROUP_RANK$|LOCAL_WORLD_SIZE$|MASTER_)")


@dataclass
class Command:
    """One docs/clusters.md command: its launcher (python, torchrun or srun), launcher options and Hydra overrides."""

    launcher: str
    overrides: list[str]
    options: dict[str, str] = field(default_factory=dict)
    """torchrun's ``--nnodes``, ``--nproc-per-node``, ...; for srun the job's ``#SBATCH`` settings."""

    def __str__(self) -> str:
        return f"{self.launcher} {' '.join(self.overrides)}"


def readme_commands() -> list[Command]:
    """Every ``train.py`` command of docs/clusters.md, in order."""
    text = (ROOT / "docs" / "clusters.md").read_text()
    section = text[text.index(SECTION[0]) : text.index(SECTION[1])]
    commands, sbatch = [], {}
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            if line.startswith("#SBATCH"):
                key, _, value = line.removeprefix("#SBATCH").strip().lstrip("-").partition("=")
                sbatch[key] = value
                continue
            tokens = shlex.split(line, comments=True)
            if "train.py" not in tokens:
                continue
            at = tokens.index("train.py")
            launcher = "srun" if tokens[0] == "srun" else tokens[0]
            options = dict(t.lstrip("-").partition("=")[::2] for t in tokens[1:at] if t.startswith("--"))
            commands.append(Command(launcher, tokens[at + 1 :], sbatch if launcher == "srun" else options))
    return commands


COMMANDS = readme_commands()


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="train", overrides=[*overrides, "output_dir=x"])


def launcher_environment(command: Command, node: int, local: int) -> tuple[dict[str, str], int]:
    """The variables the launcher gives process ``local`` of node ``node``, and the world size it starts."""
    if command.launcher == "torchrun":
        nodes, per_node = int(command.options["nnodes"]), int(command.options["nproc-per-node"])
        env = {"TORCHELASTIC_RUN_ID": "none", "GROUP_RANK": str(node), "LOCAL_RANK": str(local)}
        env |= {"RANK": str(node * per_node + local), "WORLD_SIZE": str(nodes * per_node)}
        env |= {"LOCAL_WORLD_SIZE": str(per_node), "MASTER_ADDR": command.options["master-addr"]}
        return env | {"MASTER_PORT": command.options["master-port"]}, nodes * per_node
    if command.launcher == "srun":
        nodes, per_node = int(command.options["nodes"]), int(command.options["ntasks-per-node"])
        env = {"SLURM_NTASKS": str(nodes * per_node), "SLURM_NTASKS_PER_NODE": str(per_node)}
        env |= {"SLURM_NNODES": str(nodes), "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "4242"}
        env |= {"SLURM_PROCID": str(node * per_node + local), "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node)}
        return env | {"SLURM_NODELIST": "node[0-1]"}, nodes * per_node
    return {}, 0  # python: Lightning starts the processes itself


def validate(trainer) -> None:
    """The check Lightning's process launcher runs at the start of ``Trainer.fit``, before any process starts."""
    trainer.strategy.cluster_environment.validate_settings(num_devices=trainer.num_devices, num_nodes=trainer.num_nodes)


@pytest.fixture
def clean_env(monkeypatch):
    """No launcher variables of the machine running the tests."""
    for name in list(os.environ):
        if LAUNCH_VARS.match(name):
            monkeypatch.delenv(name)
    return monkeypatch


def test_the_section_has_every_kind_of_launch():
    assert [c.launcher for c in COMMANDS] == ["python", "python", "torchrun", "python", "srun"]
    assert all(c.overrides[0].startswith("experiment=") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_command_builds_the_trainer_and_splits_the_global_batch(command, clean_env):
    cfg = _compose(command.overrides)
    devices, nodes = cfg.trainer.devices, cfg.trainer.num_nodes
    node, local = nodes - 1, devices - 1  # the last process: ranks read from the environment, not defaulted
    env, launched = launcher_environment(command, node, local)
    for name, value in env.items():
        clean_env.setenv(name, value)

    trainer = hydra.utils.instantiate(
        cfg.trainer, accelerator="cpu", logger=False, callbacks=[], enable_checkpointing=False
    )
    assert isinstance(trainer.strategy, DDPStrategy)
    assert trainer.world_size == devices * nodes == trainer.num_devices * trainer.num_nodes
    expected_env = {"torchrun": TorchElasticEnvironment, "srun": SLURMEnvironment}.get(command.launcher)
    environment = trainer.strategy.cluster_environment
    if expected_env is None:
        assert type(environment) is LightningEnvironment and not env  # Lightning launches the processes
        assert (trainer.global_rank, trainer.node_rank) == (0, 0)
    else:
        assert type(environment) is expected_env and expected_env.detect()
        assert launched == trainer.world_size  # the launcher starts exactly the processes the Trainer expects
        assert (trainer.node_rank, trainer.local_rank) == (node, local)
        assert trainer.global_rank == node * devices + local == trainer.world_size - 1
        validate(trainer)  # what Trainer.fit's launcher checks first: the launcher's counts match the Trainer's
    if cfg.trainer.get("precision") == "bf16-mixed":
        assert trainer.precision == "bf16-mixed"

    datamodule = instantiate_datamodule(cfg)
    datamodule.trainer = trainer
    datamodule.set_device_batch_size()
    per_device = datamodule.batch_size_per_device
    assert per_device == cfg.datamodule.batch_size // (devices * nodes) >= 1
    assert per_device * trainer.world_size == cfg.datamodule.batch_size
    if cfg.datamodule._target_.endswith("KGQADataModule"):  # every rank's slice of each global batch
        groups = [list(range(3 * cfg.datamodule.batch_size))]
        ranks = [
            KGBatchSampler(groups, per_device, trainer.world_size, r, seed=cfg.seed) for r in range(devices * nodes)
        ]
        for step in zip(*ranks, strict=True):
            assert all(len(local_batch) == per_device for local_batch in step)
            assert sorted(i for local_batch in step for i, _ in local_batch) == sorted({i for b in step for i, _ in b})


def test_a_global_batch_that_does_not_split_is_refused(clean_env):
    torchrun = next(c for c in COMMANDS if c.launcher == "torchrun")
    cfg = _compose([o for o in torchrun.overrides if not o.startswith("datamodule.batch_size")])
    assert cfg.datamodule.batch_size == 4  # GLM-RAG Table 14, too small for 16 processes
    for name, value in launcher_environment(torchrun, 0, 0)[0].items():
        clean_env.setenv(name, value)
    datamodule = instantiate_datamodule(cfg)
    datamodule.trainer = hydra.utils.instantiate(cfg.trainer, accelerator="cpu", logger=False, callbacks=[])
    with pytest.raises(ValueError, match="batch_size 4 is not divisible by the 16 devices"):
        datamodule.set_device_batch_size()


@pytest.mark.parametrize(
    ("launcher", "key", "wrong_value", "error"),
    [
        ("srun", "trainer.devices", 4, "--ntasks-per-node=8"),  # SLURM's tasks per node vs the devices
        ("torchrun", "trainer.num_nodes", 1, r"does not match the world size \(16\)"),  # torchrun's world size
    ],
)
def test_launchers_check_their_world_against_the_trainer(clean_env, launcher, key, wrong_value, error):
    command = next(c for c in COMMANDS if c.launcher == launcher)
    wrong = [o for o in command.overrides if not o.startswith(key)] + [f"{key}={wrong_value}"]
    for name, value in launcher_environment(command, 0, 0)[0].items():
        clean_env.setenv(name, value)
    trainer = hydra.utils.instantiate(_compose(wrong).trainer, accelerator="cpu", logger=False, callbacks=[])
    with pytest.raises(ValueError, match=error):
        validate(trainer)
