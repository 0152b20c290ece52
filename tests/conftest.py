"""Fixtures shared by all test folders."""

import pytest

from glmrag.index.synthetic import build_kg, random_kg


@pytest.fixture
def kg():
    """The factory :func:`glmrag.index.synthetic.build_kg`."""
    return build_kg


@pytest.fixture
def random_graph():
    """The factory :func:`glmrag.index.synthetic.random_kg`."""
    return random_kg


@pytest.fixture(scope="module")
def glmrag_cache(tmp_path_factory):
    """One GLMRAG_CACHE_DIR for the session: the musique100 index and its GNN inputs are built once.

    Not named ``cache``: that would shadow pytest's own ``cache`` fixture in every folder. Module-scoped
    because the variable is set only while a module that asks for it runs.
    """
    path = tmp_path_factory.getbasetemp() / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GLMRAG_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def index_config(glmrag_cache):
    """A factory of the index config (``configs/index/default.yaml``) over the shared cache, OpenIE triples.

    Each call returns a fresh plain dict; keyword arguments replace its entries.
    """

    def make(**overrides) -> dict:
        return {
            "cache_dir": str(glmrag_cache / "indexes"),
            "extractor": "openie",
            "rebuild": False,
            "embed_model": "offline:all-MiniLM-L6-v2",
            "synonym_threshold": 0.8,
            "synonym_top_k": 100,
            "spacy_processes": 1,
        } | overrides

    return make
