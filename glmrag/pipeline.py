"""The evaluation job: dataset -> cached KG index -> retrievers -> evaluator -> reports.

This is the one place that wires the layers together from a Hydra config
(``configs/eval.yaml``); ``eval.py`` is a thin wrapper around :func:`run_eval`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from glmrag.data.registry import load_dataset
from glmrag.eval import EvalResult, evaluate, format_markdown, write_outputs
from glmrag.eval.store import run_record, write_run
from glmrag.index.cache import get_index
from glmrag.index.embed import Embedder
from glmrag.retrievers.base import Ranking, Retriever

log = logging.getLogger(__name__)


def make_retrievers(cfg: DictConfig) -> dict[str, Retriever]:
    """One retriever per entry of ``cfg.retriever``, named by its key (``dense``, ``ppr``, ...)."""
    retrievers = {name: hydra.utils.instantiate(node) for name, node in cfg.items()}
    for name, r in retrievers.items():
        if not isinstance(r, Retriever):
            raise TypeError(
                f"retriever {name} ({type(r).__name__}) does not implement glmrag.retrievers.base.Retriever"
            )
    return retrievers


def run_eval(cfg: DictConfig) -> EvalResult:
    """Rank the questions of ``cfg.data`` with every retriever in ``cfg.retriever`` and evaluate them together."""
    full = load_dataset(cfg.data.name, root=cfg.data.root)
    dataset = load_dataset(cfg.data.name, split=cfg.data.split, limit=cfg.data.limit, root=cfg.data.root)
    log.info(
        "%s: %d questions, %d passages; %s",
        dataset.name,
        len(dataset.qa),
        len(dataset.corpus),
        dataset.report.summary(),
    )
    index = get_index(full, cfg.index)
    questions = list(dataset.qa)

    rankings: dict[str, list[Ranking]] = {}
    ms_per_question: dict[str, float] = {}
    for name, retriever in make_retrievers(cfg.retriever).items():
        start = time.perf_counter()
        rankings[name] = retriever.retrieve(questions, index, dataset.corpus, top_k=max(cfg.top_k, max(cfg.ks)))
        ms_per_question[name] = 1000 * (time.perf_counter() - start) / max(len(questions), 1)
        log.info("%s: %.1f ms per question", name, ms_per_question[name])

    question_embeddings = None
    if index.entity_embeddings is not None and cfg.index.embed_model:
        question_embeddings = Embedder(cfg.index.embed_model).encode([q.question for q in questions])
    result = evaluate(
        rankings,
        questions,
        index,
        ks=tuple(cfg.ks),
        reference=cfg.reference or next(iter(rankings)),
        question_embeddings=question_embeddings,
        n_boot=cfg.n_boot,
        seed=cfg.seed,
    )
    # wall time of retrieve() over all questions, loading included (GLM-RAG Table 7 measures it on a GPU:
    # benchmarks/gpu_gnn.py, benchmarks/gpu_glm.py)
    result.settings["ms_per_question"] = ms_per_question
    result.settings["config"] = OmegaConf.to_container(cfg, resolve=True)
    paths = write_outputs(result, cfg.output_dir)
    print(format_markdown(result))
    print(f"\nwritten: {', '.join(str(p) for p in paths.values())}")
    return result


def hydra_overrides() -> list[str]:
    """The command-line overrides of this Hydra job (a multirun job's include its swept values); [] outside Hydra."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def resolved_config_yaml(cfg: DictConfig) -> str:
    """``cfg`` without its ``hydra`` node, interpolations resolved, as YAML.

    Resolved through ``cfg`` itself, not a copy, so cached resolvers keep the values the run used
    (``${now:...}`` in ``checkpoint_dir`` is the time the run started, not the time of writing).
    """
    nodes = {key: cfg[key] for key in cfg if key != "hydra"}
    return OmegaConf.to_yaml(
        {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in nodes.items()}
    )


def store_eval_run(cfg: DictConfig, result: EvalResult) -> Path:
    """File an ``eval.py`` run in the results store (``cfg.results_dir``); returns its folder."""
    run = {
        "study": cfg.study,
        "run_name": cfg.run_name,
        "family": result.reference,
        "eval_data": cfg.data.name,
        "output_dir": str(cfg.output_dir),
        "settings": {"data.name": cfg.data.name, "data.split": cfg.data.split, "data.limit": cfg.data.limit},
        "overrides": hydra_overrides(),
    }
    path = write_run(cfg.results_dir, cfg.run_name, run_record(result, run), resolved_config_yaml(cfg))
    log.info("stored in %s", path)
    return path
