"""The console scripts ``glmrag-train`` and ``glmrag-eval`` (``train.py`` and ``eval.py`` call the same).

The configs are found by :func:`glmrag.jobs.config_path.config_dir`: a source checkout's ``configs/``,
else the copy shipped inside the installed package, so a non-editable ``pip install`` works from
any folder.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from glmrag.jobs.config_path import config_dir
from glmrag.progress import quiet_third_party, set_quiet

_CONFIGS = str(config_dir())


@hydra.main(version_base="1.3", config_path=_CONFIGS, config_name="train")
def train(cfg: DictConfig) -> None:
    """``glmrag-train experiment=demo``: train, test the best checkpoint, evaluate it against the baselines."""
    from glmrag.jobs.train import run_train

    _logging(cfg)
    run_train(cfg)


@hydra.main(version_base="1.3", config_path=_CONFIGS, config_name="eval")
def evaluate(cfg: DictConfig) -> None:
    """``glmrag-eval data=toy retriever=[dense,ppr]``: evaluate retrievers with the shared evaluator."""
    from glmrag.jobs.evaluate import run_eval, store_eval_run

    _logging(cfg)
    store_eval_run(cfg, run_eval(cfg))


def _logging(cfg: DictConfig) -> None:
    """``quiet=true``: no progress bars or stage lines; always: third-party INFO lowered to WARNING."""
    quiet_third_party()
    if cfg.get("quiet"):
        set_quiet()
