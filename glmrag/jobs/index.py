"""The index job: build a dataset's KG index into the index cache, on one machine or as a sharded build.

    python -m glmrag.jobs.index data=2wiki_test                  # one machine (as eval.py would build it)
    python -m glmrag.jobs.index data=2wiki_test shard=0/4        # shard 0 of 4: extract + embed its passages
    python -m glmrag.jobs.index data=2wiki_test merge=true       # from the shards: the cached index

``configs/build_index.yaml`` composes ``data`` and ``index`` as ``eval.py`` does, so the merge stores the index
in the folder :func:`glmrag.index.cache.get_index` reads: ``eval.py`` and ``train.py`` with the same ``data`` and
``index.*`` then load it without a rebuild. Inside a SLURM array job ``shard`` defaults to the array task
(:meth:`glmrag.index.shards.Shard.from_slurm`). The shards live under ``shard_dir`` (default: a folder of the
index cache named by the inputs shards depend on, :func:`glmrag.index.shards.shard_key`). ``docs/clusters.md``
shows a SLURM array script and its merge.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig

from glmrag.data.files import register_data
from glmrag.data.registry import load_dataset
from glmrag.data.types import Dataset, check_dataset_name
from glmrag.index.cache import get_index, index_request
from glmrag.index.kg import KGIndex
from glmrag.index.shards import Shard, build_shard, merge_shards, shard_key
from glmrag.io import check_room, children_die_with_parent
from glmrag.jobs.cli import _CONFIGS as CONFIGS
from glmrag.jobs.cli import _check_arguments, _logging, reported_errors

log = logging.getLogger(__name__)


def shard_dir(cfg: DictConfig, dataset: Dataset) -> Path:
    """``cfg.shard_dir``, or ``<index.cache_dir>/shards/<data>-<extractor>-<shard key>``."""
    if cfg.get("shard_dir"):
        folder = Path(cfg.shard_dir).expanduser()
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(f"shard_dir={cfg.shard_dir} is a file; give a folder for the shard folders")
        return folder
    request = index_request(dataset, cfg.index)
    key = shard_key(dataset.corpus, request.extractor, request.settings)
    name = check_dataset_name(dataset.name, "the dataset name")
    return Path(cfg.index.cache_dir).expanduser() / "shards" / f"{name}-{request.extractor.name}-{key}"


def merge_count(value) -> int | None:
    """``merge``: True -> None (the one count found), a whole number n >= 1 -> n, False -> no merge (0)."""
    if value is True or (isinstance(value, str) and value.lower() == "true"):
        return None
    if value is False or value is None or (isinstance(value, str) and value.lower() == "false"):
        return 0
    if isinstance(value, int) and value >= 1:
        return value
    raise ValueError(f"merge={value!r}: expected true (the shards found), a shard count n >= 1, or false")


def run_index(cfg: DictConfig) -> KGIndex | Path:
    """Build the index of ``cfg.data`` (the whole build, or the merge of its shards): the index; with a shard
    (``cfg.shard`` or the SLURM array task): write that shard and return its folder."""
    merge = merge_count(cfg.get("merge", False))
    shard = Shard.parse(cfg.shard) if cfg.get("shard") is not None else None
    if shard is not None and merge != 0:
        raise ValueError(f"shard={cfg.shard} and merge={cfg.merge}: a run writes one shard or merges, not both")
    if shard is None and merge == 0:
        shard = Shard.from_slurm()
    check_room(cfg.index.cache_dir, "the index cache")
    register_data(cfg.data)  # data=files: the user's own files become dataset cfg.data.name
    children_die_with_parent()  # spaCy workers must not outlive a killed job
    dataset = load_dataset(cfg.data.name, root=cfg.data.root)  # the whole dataset: every split shares its index
    if shard is not None:
        request = index_request(dataset, cfg.index)
        root = shard_dir(cfg, dataset)
        folder = build_shard(dataset.corpus, request.extractor, request.embedder, request.settings, shard, root)
        start, stop = shard.bounds(len(dataset.corpus))
        log.info(
            "shard %s of %s (passages %d-%d of %d) written to %s",
            shard,
            dataset.name,
            start,
            stop,
            len(dataset.corpus),
            folder,
        )
        return folder
    if merge == 0:
        return get_index(dataset, cfg.index)
    root = shard_dir(cfg, dataset)
    log.info("merging the shards in %s into the index of %s", root, dataset.name)
    return get_index(
        dataset,
        cfg.index,
        build=lambda req: merge_shards(
            root, dataset.corpus, dataset.qa, req.extractor, req.embedder, req.settings, count=merge
        ),
    )


@hydra.main(version_base="1.3", config_path=CONFIGS, config_name="build_index")
def _main(cfg: DictConfig) -> None:
    with reported_errors("python -m glmrag.jobs.index"):
        _logging(cfg)
        run_index(cfg)


def main() -> None:
    """``python -m glmrag.jobs.index data=2wiki_test [shard=i/n | merge=true]``; a config name that does not exist
    or a mistyped key stops the job with the valid names, as ``eval.py`` does (:mod:`glmrag.jobs.cli`)."""
    _check_arguments("python -m glmrag.jobs.index", "build_index")
    _main()


if __name__ == "__main__":
    main()
