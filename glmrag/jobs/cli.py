"""The console scripts ``glmrag-train`` and ``glmrag-eval`` (``train.py`` and ``eval.py`` call the same).

The configs are found by :func:`glmrag.jobs.config_path.config_dir`: a source checkout's ``configs/``,
else the copy shipped inside the installed package, so a non-editable ``pip install`` works from
any folder. Before Hydra starts, the command line is checked (:func:`argument_error`): a config that does not
exist (``retriever=[dnse]``) or a mistyped key (``trainer.max_epoch=2``) stops the job with the valid names and
a "did you mean"; so do an interpolation that cannot resolve and a run folder that cannot be made. A user's
mistake found later (:data:`USER_ERRORS`) is one message naming the key, file or record and the fix, without
a traceback: the traceback is behind ``HYDRA_FULL_ERROR=1`` or ``--verbose``. ``--help`` prints the help of
``configs/train.yaml`` / ``eval.yaml`` (``hydra.help``).
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override
from hydra.errors import ConfigCompositionException, HydraException, InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, InterpolationResolutionError, OmegaConfBaseException

from glmrag.data.types import DataFormatError
from glmrag.eval.outputs import OutputDirTaken, fresh_output_dir
from glmrag.index.shards import ShardError
from glmrag.index.store import StaleIndexError
from glmrag.io import CacheError, CheckpointPathError, DiskFullError, LockTimeout
from glmrag.jobs.config_check import ConfigError
from glmrag.jobs.config_path import config_dir
from glmrag.llm.base import LLMError
from glmrag.llm.endpoint import EndpointError
from glmrag.models.checkpointing import CheckpointLayoutError, CheckpointMismatchError
from glmrag.progress import quiet_third_party, set_quiet

_CONFIGS = str(config_dir())
log = logging.getLogger(__name__)


def choices(group: str, configs: str | Path = _CONFIGS) -> list[str]:
    """The config names of ``group`` (a folder under ``configs/``, ``system/capacity`` for a nested one), sorted."""
    folder = Path(configs) / group
    return sorted(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.yaml"))


# configs/train.yaml and eval.yaml list the names of a group in their help as ${glmrag_choices:retriever}
if not OmegaConf.has_resolver("glmrag_choices"):
    OmegaConf.register_new_resolver("glmrag_choices", lambda group: ", ".join(choices(group)))


def unknown_choice_error(args: Sequence[str], script: str, configs: str | Path = _CONFIGS) -> str | None:
    """The message for the first of the command-line ``args`` that names a config missing from its group
    (``data=musique``, ``retriever=[dense,dnse]``, ``llm@reader.llm=htp``, a sweep ``model=gnn,glm``),
    listing the group's configs; None when every named config exists. Arguments that are not group
    overrides (``data.limit=5``, flags) and those Hydra cannot parse are left to Hydra."""
    parser = OverridesParser.create()
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            override = parser.parse_override(arg)
        except Exception:  # Hydra reports its own syntax errors
            continue
        group = override.key_or_group
        if override.is_delete() or group.startswith("hydra") or not (Path(configs) / group).is_dir():
            continue
        value = override.value()
        values = value.list if isinstance(value, ChoiceSweep) else [value]  # a sweep: each run's value
        names = [n for v in values for n in (v if isinstance(v, list) else [v])]  # a list: each config of it
        valid = choices(group, configs)
        for name in names:
            if isinstance(name, str) and name not in valid:
                close = difflib.get_close_matches(name, valid, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                return (
                    f"{script}: no {group} config named {name!r} (in '{arg}').{hint}\n"
                    f"The {group} configs (configs/{group}/) are: {', '.join(valid)}.\n"
                    f"More: {'python ' if script.endswith('.py') else ''}{script} --help"
                )
    return None


USER_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    DataFormatError,
    CheckpointPathError,
    CheckpointMismatchError,
    CheckpointLayoutError,
    OutputDirTaken,
    ShardError,
    StaleIndexError,
    CacheError,
    DiskFullError,
    LockTimeout,
    LLMError,
    EndpointError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ConnectionError,
    OmegaConfBaseException,
    ValueError,
)
"""Errors that are the user's to fix (a setting, a file, a record, a folder, a server), each raised with a message
that names it and the fix: the job prints that message alone (:func:`reported_errors`). ``ValueError`` is how
glmrag's checks of a value refuse it (:class:`~glmrag.jobs.config_check.ConfigError` is one); another library's
ValueError is printed the same way, with the line that says how to see its traceback."""
VERBOSE = "--verbose"
"""Command-line flag (glmrag's, taken out before Hydra parses) for the full traceback: ``HYDRA_FULL_ERROR=1``."""
FULL_ERROR_ENV = "HYDRA_FULL_ERROR"
HELP_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i")


def _full_error() -> bool:
    return os.environ.get(FULL_ERROR_ENV) == "1"


@contextlib.contextmanager
def reported_errors(script: str) -> Iterator[None]:
    """A :data:`USER_ERRORS` raised in the body ends the job with its message and exit code 1, no traceback
    (unless ``HYDRA_FULL_ERROR=1``); anything else keeps its traceback (a bug, to report)."""
    try:
        yield
    except (*USER_ERRORS, InstantiationException) as e:
        # Hydra's instantiate wraps what a constructor raised: the constructor's own error is the message
        error = e.__cause__ if isinstance(e, InstantiationException) else e
        if _full_error() or not isinstance(error, USER_ERRORS):
            raise
        message = f"{script}: {_message(error)}"
        print(f"{message}\n(the traceback: {FULL_ERROR_ENV}=1 or {VERBOSE})", file=sys.stderr)
        _to_log_files(message)
        raise SystemExit(1) from None


def _to_log_files(message: str) -> None:
    """``message`` as an ERROR line in the job's log files (Hydra's ``<job>.log``), not on the console again."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _message(error: BaseException) -> str:
    """The error's own message, with the config key OmegaConf names on a line of its own."""
    text = str(error).split("\n    full_key:")[0] or type(error).__name__  # OmegaConf appends the key and types
    if isinstance(error, OmegaConfBaseException) and getattr(error, "full_key", None):
        return f"{error.full_key}: {text}"
    return text


def argument_error(args: Sequence[str], config_name: str, script: str, configs: str | Path = _CONFIGS) -> str | None:
    """The message for the first mistake in the command-line ``args`` of ``python <script>`` (config
    ``config_name``), found before any work: a config missing from its group (:func:`unknown_choice_error`), an
    override Hydra cannot apply (a mistyped key, with the keys beside it and a "did you mean"), an interpolation
    that does not resolve, a run folder that cannot be made. None when there is none. Swept values (``-m a=1,2``)
    are checked by Hydra per job; ``--help`` and friends are not checked."""
    if any(a in HELP_FLAGS for a in args):
        return None
    if message := unknown_choice_error(args, script, configs):
        return message
    parser = OverridesParser.create()
    overrides: list[tuple[str, Override]] = []
    for arg in args:
        if arg.startswith("-"):
            continue
        try:
            override = parser.parse_override(arg)
        except HydraException as e:
            return f"{script}: cannot read '{arg}': {e}\nQuote a value holding = , [ ] {{ }} or spaces: key='a=b'."
        if not override.is_sweep_override():
            overrides.append((arg, override))
    from glmrag.jobs.common import compose_config

    plain = [arg for arg, o in overrides if not o.key_or_group.startswith("hydra.")]
    try:
        cfg = compose_config(config_name, plain)
    except ConfigCompositionException as e:
        return _composition_error(e, overrides, config_name, script)
    except OmegaConfBaseException as e:
        return f"{script}: {_message(e)}"
    multirun = any(a in ("-m", "--multirun") for a in args)
    plain_args = [a for a, _ in overrides]
    return (
        _interpolation_error(cfg, script)
        or _run_folder_error(plain_args, multirun, script)
        or _output_dir_error(plain_args, script)
    )


def _composition_error(
    error: ConfigCompositionException, overrides: list[tuple[str, Override]], config_name: str, script: str
) -> str:
    """A mistyped key: which keys its node has, the closest first; any other composition error as Hydra says it."""
    from glmrag.jobs.common import compose_config

    cause = error.__cause__
    key = getattr(cause, "full_key", None)
    if not isinstance(cause, ConfigKeyError | ConfigAttributeError) or not key:
        return f"{script}: {error}" + (f" ({_message(cause)})" if cause else "")
    arg = next((a for a, o in overrides if o.key_or_group == key or o.key_or_group.startswith(key + ".")), key)
    parent, _, name = key.rpartition(".")
    others = [a for a, o in overrides if a != arg and not o.key_or_group.startswith("hydra.")]
    try:
        node = OmegaConf.select(compose_config(config_name, others), parent) if parent else compose_config(config_name)
    except ConfigCompositionException as e:  # another override is mistyped too: name that one
        return _composition_error(e, [(a, o) for a, o in overrides if a != arg], config_name, script)
    keys = [str(k) for k in node.keys()] if OmegaConf.is_dict(node) else []
    close = difflib.get_close_matches(name, keys, n=1)
    where = f"'{parent}'" if parent else "the top level"
    hint = f" Did you mean {(parent + '.' if parent else '') + close[0]}?" if close else ""
    typed = OmegaConf.is_dict(node) and OmegaConf.get_type(node) is not dict  # a dataclass: no key can be added
    return f"{script}: '{arg}': {where} has no key {name!r}.{hint}\nThe keys of {where}: {', '.join(sorted(keys))}." + (
        "" if typed else f"\nTo add a new key on purpose: +{arg.lstrip('+')}"
    )


def _interpolation_error(cfg: DictConfig, script: str) -> str | None:
    """The first key whose ``${...}`` cannot resolve (a missing key, an unset variable), or None. ``output_dir``
    reads Hydra's runtime (``${hydra:runtime.output_dir}``), set only once the job runs: it is left to Hydra."""
    cfg = cfg.copy()
    if OmegaConf.is_interpolation(cfg, "output_dir"):
        cfg.output_dir = "<Hydra's run folder>"
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except InterpolationResolutionError as e:
        key = getattr(e, "full_key", None)
        return f"{script}: {_message(e)}; set {key} to a value, or fix the ${{...}} it reads"
    return None


def _run_folder_error(args: Sequence[str], multirun: bool, script: str) -> str | None:
    """A ``hydra.run.dir`` (``hydra.sweep.dir`` for a ``multirun``) set in ``args`` that cannot be made, or None.
    Checked by making and removing a temporary folder in its nearest existing parent: nothing of the run is
    created here."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [a.partition("=")[2] for a in args if a.startswith(f"{key}=")]
    if not given:
        return None  # the default, under the working folder: the job's own checks name a full or read-only disk
    folder = Path(given[-1])
    parent = next(p for p in [folder, *folder.absolute().parents] if p.exists())
    try:
        if not parent.is_dir():
            raise NotADirectoryError(f"{parent} is a file")
        os.rmdir(tempfile.mkdtemp(prefix=".glmrag-check-", dir=parent))
    except OSError as e:
        reason = e.strerror or e
        return f"{script}: {key}={given[-1]}: cannot make the run folder there ({reason}); choose a writable folder"
    return None


def _output_dir_error(args: Sequence[str], script: str) -> str | None:
    """An ``output_dir`` given on the command line that already holds files, or None: Hydra writes its run
    folder there (:func:`run_folder_follows_output_dir`), which must not replace an earlier run's files."""
    given = [a.partition("=")[2] for a in args if a.startswith("output_dir=")]
    if any(a.startswith("hydra.run.dir=") for a in args) or not _first_rank():
        return None  # Hydra's folder is chosen (a DDP rank's is its job's); the job checks output_dir itself
    if not given or not Path(given[-1]).is_dir() or not any(Path(given[-1]).iterdir()):
        return None
    try:
        fresh_output_dir(given[-1])  # refuses the folder, naming its files
    except OutputDirTaken as e:
        return f"{script}: {e}"
    return f"{script}: output_dir={given[-1]} holds a Hydra run folder already; pass a new output_dir=<folder>"


def _first_rank() -> bool:
    """This process is not a later rank of a job that torchrun or SLURM started on several processes."""
    return all(os.environ.get(name, "0") == "0" for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID"))


def run_folder_follows_output_dir(args: Sequence[str]) -> list[str]:
    """``args`` with ``hydra.run.dir`` set to the ``output_dir`` they give (unless they set it, or sweep), so that
    everything a run writes but its checkpoints and its results-store entry goes there: Hydra's ``.hydra/`` and
    the job's log too, not ``outputs/<job>/...`` under the working folder."""
    given = [a.partition("=")[2] for a in args if a.startswith("output_dir=")]
    chosen = any(a.startswith("hydra.run.dir=") for a in args) or any(a in ("-m", "--multirun") for a in args)
    return [*args, f"hydra.run.dir={given[-1]}"] if given and not chosen else list(args)


def _check_arguments(script: str, config_name: str) -> None:
    """Take ``--verbose`` out of the command line (it sets ``HYDRA_FULL_ERROR=1``), stop on
    :func:`argument_error`'s message with exit code 2, and point Hydra's run folder at ``output_dir``
    (:func:`run_folder_follows_output_dir`)."""
    if VERBOSE in sys.argv:
        sys.argv.remove(VERBOSE)
        os.environ[FULL_ERROR_ENV] = "1"
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0].endswith(".py") else script
    message = argument_error(sys.argv[1:], config_name, script)
    if message is not None:
        print(message, file=sys.stderr)
        sys.exit(2)
    sys.argv[1:] = run_folder_follows_output_dir(sys.argv[1:])


@hydra.main(version_base="1.3", config_path=_CONFIGS, config_name="train")
def _train(cfg: DictConfig) -> None:
    with reported_errors("train.py"):
        from glmrag.jobs.train import run_train

        _logging(cfg)
        run_train(cfg)


@hydra.main(version_base="1.3", config_path=_CONFIGS, config_name="eval")
def _evaluate(cfg: DictConfig) -> None:
    with reported_errors("eval.py"):
        from glmrag.jobs.evaluate import run_eval, store_eval_run

        _logging(cfg)
        store_eval_run(cfg, run_eval(cfg))


def train() -> None:
    """``glmrag-train experiment=demo``: train, test the best checkpoint, evaluate it against the baselines."""
    _check_arguments("glmrag-train", "train")
    _train()


def evaluate() -> None:
    """``glmrag-eval data=toy retriever=[dense,ppr]``: evaluate retrievers with the shared evaluator."""
    _check_arguments("glmrag-eval", "eval")
    _evaluate()


def _logging(cfg: DictConfig) -> None:
    """``quiet=true``: no progress bars or stage lines; always: third-party INFO lowered to WARNING, one line
    per message, and the run's folder named first."""
    quiet_third_party()
    one_line_per_message()
    if cfg.get("quiet"):
        set_quiet()
    log.info("%s: output in %s", cfg.run_name, cfg.output_dir)


LIGHTNING_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")
TIP = "💡 Tip:"
"""Lightning's advertisement of a logging service, once per Trainer."""


class _NoTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TIP)


def one_line_per_message() -> None:
    """Route Lightning's messages through the handlers Hydra gave the root logger, once each.

    Imported before Hydra sets up logging, Lightning adds a stderr handler of its own and stops propagating:
    its lines then miss the run's log file, and appear twice where both paths are open. Its tips are dropped.
    """
    root = logging.getLogger()
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if root.handlers:
            consoles = [h for h in logger.handlers if type(h) in (logging.StreamHandler, logging.NullHandler)]
            for handler in consoles:
                logger.removeHandler(handler)
            logger.propagate = True
        if name != "lightning":
            rank_zero = logging.getLogger(f"{name}.utilities.rank_zero")  # a filter sees its own logger's records only
            if not any(isinstance(f, _NoTips) for f in rank_zero.filters):
                rank_zero.addFilter(_NoTips())
