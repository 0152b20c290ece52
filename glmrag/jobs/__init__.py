"""The entry floor: the jobs that ``train.py`` and ``eval.py`` (and ``glmrag-train`` / ``glmrag-eval``) run.

The only floor that knows Hydra and OmegaConf; everything below takes typed settings or plain mappings.

- :mod:`~glmrag.jobs.train`: train a retriever (KG-completion pretraining first when asked), test the best
  checkpoint, hand it to the evaluation job; :mod:`~glmrag.jobs.run_folder`: its checkpoint folder (resume, lock).
- :mod:`~glmrag.jobs.evaluate`: evaluate retrievers on a dataset (retrieval, QA, LLM cost).
- :mod:`~glmrag.jobs.report`: ``glmrag report``: study tables and figures from stored runs.
- :mod:`~glmrag.jobs.loggers`: loggers per job (wandb mode, runs kept apart, tables and artifacts).
- :mod:`~glmrag.jobs.common`: what the jobs share (composing a config, overrides, the resolved config).
- :mod:`~glmrag.jobs.config_check`, :mod:`~glmrag.jobs.config_path`: the CLI config checked up front, the
  config folder, run names and the OmegaConf resolvers.
- :mod:`~glmrag.jobs.cli`: the console scripts.
"""

from glmrag.jobs import config_path  # noqa: F401  (registers the ${glmrag_cache:} and ${glmrag_overrides:} resolvers)
