"""The console scripts ``glmrag-train`` and ``glmrag-eval`` (``train.py`` and ``eval.py`` call the same).

The configs are found by :func:`glmrag.jobs.config_path.config_dir`: a source checkout's ``configs/``,
else the copy shipped inside the installed package, so a non-editable ``pip install`` works from
any folder. Before Hydra starts, an override that names a config that does not exist
(``retriever=[dnse]``) stops the job with the list of valid names (:func:`unknown_choice_error`);
``--help`` prints the help of ``configs/train.yaml`` / ``eval.yaml`` (``hydra.help``).
"""

from __future__ import annotations

import difflib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep
from omegaconf import DictConfig, OmegaConf

from glmrag.jobs.config_path import config_dir
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


def _exit_on_unknown_choice(script: str) -> None:
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0].endswith(".py") else script
    message = unknown_choice_error(sys.argv[1:], script)
    if message is not None:
        print(message, file=sys.stderr)
        sys.exit(2)


@hydra.main(version_base="1.3", config_path=_CONFIGS, config_name="train")
def _train(cfg: DictConfig) -> None:
    from glmrag.jobs.train import run_train

    _logging(cfg)
    run_train(cfg)


@hydra.main(version_base="1.3", config_path=_CONFIGS, config_name="eval")
def _evaluate(cfg: DictConfig) -> None:
    from glmrag.jobs.evaluate import run_eval, store_eval_run

    _logging(cfg)
    store_eval_run(cfg, run_eval(cfg))


def train() -> None:
    """``glmrag-train experiment=demo``: train, test the best checkpoint, evaluate it against the baselines."""
    _exit_on_unknown_choice("glmrag-train")
    _train()


def evaluate() -> None:
    """``glmrag-eval data=toy retriever=[dense,ppr]``: evaluate retrievers with the shared evaluator."""
    _exit_on_unknown_choice("glmrag-eval")
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
