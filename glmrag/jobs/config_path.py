"""Where the Hydra configs are: the source checkout's top-level ``configs/``, else the copy in the package.

A source checkout (and an editable install) reads ``<repo>/configs``; a wheel carries the same
files as ``glmrag/configs`` (copied at build time by ``setup.py``), which is used when the
top-level folder is absent. ``$GLMRAG_CONFIG_DIR`` overrides both.

It also registers the resolvers the configs use: ``${glmrag_overrides:}``, which names runs, so that a
command-line change (``model.gnn.hidden_channels=32``) shows in the run name and its folders;
``${glmrag_run_id:}``; ``${glmrag_cache:sub}``, a cache folder; ``${glmrag_const:NAME}``, a constant of
:data:`CONSTANTS` written once in the code where it is cited.
"""

from __future__ import annotations

import hashlib
import os
import re
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

from glmrag.eval.study_tables import BOOKKEEPING_KEYS
from glmrag.graph.pagerank import HIPPORAG_DAMPING
from glmrag.io import cache_root

CONFIG_DIR_ENV = "GLMRAG_CONFIG_DIR"
RUN_ID_ENV = "GLMRAG_RUN_ID"
"""A job's ``run_id``, handed to the DDP ranks it starts (:mod:`glmrag.jobs.launch`)."""
_PACKAGE = Path(__file__).resolve().parents[1]  # glmrag/ (this module is glmrag/jobs/config_path.py)


def config_dir() -> Path:
    """The folder holding ``eval.yaml`` and ``train.yaml``; raises ``FileNotFoundError`` saying where it looked."""
    candidates = [Path(os.environ[CONFIG_DIR_ENV])] if os.environ.get(CONFIG_DIR_ENV) else []
    candidates += [_PACKAGE.parent / "configs", _PACKAGE / "configs"]
    for folder in candidates:
        if (folder / "eval.yaml").is_file():
            return folder
    raise FileNotFoundError(
        f"no glmrag configs (eval.yaml) in {', '.join(map(str, candidates))}; reinstall glmrag "
        f"or set {CONFIG_DIR_ENV} to a copy of the repository's configs/ folder"
    )


NAMED_KEYS = ("experiment", "data", "data.name", "model_name", "eval_study", "trainer", "callbacks")
"""Override keys (whole) a run name already shows (experiment, dataset) or that change no result (the device)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
"""What a key or value keeps in a run name: none of Hydra's special characters (``=``, ``,``, brackets, ``:``) or
the shell's, so a printed path goes back into a command line unquoted."""
SEPARATORS = ("@", "+")
"""How a run name joins a key to its value and one part to the next: ``...-max_epochs@2+lr@0.001``. Both are
plain characters in Hydra's override grammar and in a shell word."""
_FILE = re.compile(r"/|\.[A-Za-z]\w*$")
"""A data value that names a file or folder (a path, or a name with an extension): the run name keeps its stem."""
_COMPRESSED = re.compile(r"\.(xz|gz|bz2|zst)$")


def override_key(override: str) -> str:
    """The config key of a command-line override (``+model.x=1`` -> ``model.x``; ``logger@a=b`` -> ``logger``)."""
    return override.partition("=")[0].lstrip("+~").split("@")[0]


MAX_SUFFIX = 120
"""The longest run-name suffix: a run name is a folder name (at most 255 bytes on common filesystems)."""


def run_suffix(overrides: list[str]) -> str:
    """``-hidden_channels@32+max_epochs@3`` for the overrides that change what a run measures; ``""`` if none.

    Each override is named by the last part of its key; a value keeps only letters, digits, ``.``, ``_`` and
    ``-`` (anything else becomes ``_``), so the name, and a path holding it, can be passed back unquoted as
    ``ckpt_path=`` or ``results_dir=`` (:data:`SEPARATORS`). A suffix longer than
    :data:`MAX_SUFFIX` keeps its start and ends in 8 hex digits of a hash of the whole, so distinct runs keep
    distinct names; the store entry lists every override (``run.overrides``).
    """
    parts = []
    for override in overrides:
        key = override_key(override)
        if key.replace("/", ".").split(".")[0] in BOOKKEEPING_KEYS or key in NAMED_KEYS or "=" not in override:
            continue
        value = override.partition("=")[2].strip("[]")
        if key.startswith("data.") and _FILE.search(value):  # data.questions=/home/me/dev.json: "dev"
            value = Path(_COMPRESSED.sub("", value)).stem
        parts.append(SEPARATORS[0].join(_UNSAFE.sub("_", p) for p in (key.split(".")[-1], value)))
    suffix = "-" + SEPARATORS[1].join(parts) if parts else ""
    if len(suffix) > MAX_SUFFIX:
        digest = hashlib.sha256(suffix.encode()).hexdigest()[:8]
        suffix = f"{suffix[: MAX_SUFFIX - 10]}..{digest}"
    return suffix


def _overrides_suffix() -> str:
    from hydra.core.hydra_config import HydraConfig

    return run_suffix(list(HydraConfig.get().overrides.task)) if HydraConfig.initialized() else ""


def run_id() -> str:
    """A training run's id (its checkpoint folder): that of the job that started this DDP rank
    (:data:`RUN_ID_ENV`, :mod:`glmrag.jobs.launch`), else ``slurm-<job id>`` in a SLURM batch job, which a
    requeued job keeps, else the start time."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    if os.environ.get(RUN_ID_ENV):
        return os.environ[RUN_ID_ENV]
    if SLURMEnvironment.detect() and os.environ.get("SLURM_JOB_ID"):
        array = os.environ.get("SLURM_ARRAY_JOB_ID")
        job = f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array else os.environ["SLURM_JOB_ID"]
        return f"slurm-{job}"
    return datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


CONSTANTS = {"HIPPORAG_DAMPING": HIPPORAG_DAMPING}
"""Constants the configs read by name (``${glmrag_const:NAME}``), so each value is written once, where it is cited."""


def constant(name: str) -> float:
    """The value of ``${glmrag_const:name}``."""
    if name not in CONSTANTS:
        raise ValueError(f"${{glmrag_const:{name}}}: no such constant; the configs can read {sorted(CONSTANTS)}")
    return CONSTANTS[name]


# configs/train.yaml names a run's checkpoint folder checkpoints/${run_name}/${glmrag_run_id:}
if not OmegaConf.has_resolver("glmrag_run_id"):
    OmegaConf.register_new_resolver("glmrag_run_id", run_id, use_cache=True)
# configs/train.yaml and eval.yaml name a run ${model_name}-${data.name}${glmrag_overrides:}
if not OmegaConf.has_resolver("glmrag_overrides"):
    OmegaConf.register_new_resolver("glmrag_overrides", _overrides_suffix)
# Configs read a constant that has one source in the code as ${glmrag_const:HIPPORAG_DAMPING} (CONSTANTS).
if not OmegaConf.has_resolver("glmrag_const"):
    OmegaConf.register_new_resolver("glmrag_const", constant)
# Configs name cache folders as ${glmrag_cache:indexes}: $GLMRAG_CACHE_DIR (or ~/.cache/glmrag) / indexes.
if not OmegaConf.has_resolver("glmrag_cache"):
    OmegaConf.register_new_resolver("glmrag_cache", lambda sub="": str(cache_root() / sub))

# configs/model/*.yaml type their settings nodes with the schemas of group "schema" (glmrag/jobs/schemas.py)
from glmrag.jobs import schemas  # noqa: E402 (registered after the resolvers, as the configs need both)

schemas.register()
