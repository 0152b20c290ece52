"""glmrag: graph-based retrieval for multi-hop RAG.

The Python API (see ``docs/python_api.md``)::

    data = glmrag.load_data("toy")                  # or your files: format="hotpotqa", questions="dev.json"
    index = glmrag.build_index(data)
    table = glmrag.evaluate_systems(["dense", "ppr"], data, index)
    print(table.to_markdown())
    run = glmrag.train(["experiment=demo_2wiki"])   # = python train.py experiment=demo_2wiki
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("glmrag")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0.0.0+unknown"

_API = ("Table", "TrainedRun", "build_index", "evaluate_systems", "get_retriever", "load_data", "retrieve", "train")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    # Imported on first use: ``import glmrag.data.types`` must not load torch, Hydra and the index code.
    if name in _API:
        from glmrag import api

        return getattr(api, name)
    raise AttributeError(f"module 'glmrag' has no attribute {name!r}")
