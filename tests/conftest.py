"""Fixtures shared by all test folders, and the marker rule of the quick default run.

The default run, ``python -m pytest -m "not slow" -q`` (README, ``.ci/run``), takes minutes: a test marked
``llm`` (a real SmolLM2) or ``integration`` (musique100-scale jobs) is also ``slow``, so that command leaves it
out; ``-m llm`` or ``-m integration`` selects it. ``.ci/run`` runs those as later steps.
"""

import os

import lightning as L
import pytest

from glmrag.index.synthetic import build_kg, random_kg
from glmrag.jobs import config_path  # noqa: F401  (registers the resolvers and the schemas the configs use)

IMPLIES_SLOW = ("llm", "integration")
"""Markers whose tests count as ``slow`` in ``-m`` expressions (see the module docstring)."""


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection reads the markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(name) for name in IMPLIES_SLOW) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


CALLER_VARIABLES = ("WANDB_", "SLURM_", "GLMRAG_RUN_ID")
"""Prefixes of the caller's environment variables that change what glmrag does (wandb's mode and key, a SLURM
allocation's run id and launcher, a fixed run id): no test may depend on how the user's shell is set up."""


@pytest.fixture(autouse=True)
def hermetic_environment(monkeypatch):
    """Each test starts without :data:`CALLER_VARIABLES`; a test sets what it needs with ``monkeypatch``."""
    for name in [n for n in os.environ if n.startswith(CALLER_VARIABLES)]:
        monkeypatch.delenv(name)


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


TINY_MUSIQUE = "musique_tiny"
TINY_QUESTIONS = 16
"""musique_tiny: the first 16 musique100 questions (splits of 10 / 3 / 3), their supporting paragraphs and
the first distractor of each: 57 passages; the index reads musique100's own OpenIE file."""


@pytest.fixture(scope="session")
def tiny_musique_files(tmp_path_factory):
    """``(questions, corpus)`` paths of musique_tiny in HippoRAG's format, written once per test session."""
    import json

    from glmrag.data.embedded_files import embedded_path
    from glmrag.data.formats.common import read_json
    from glmrag.data.types import Passage

    questions = read_json(embedded_path("musique_train.json"))[:TINY_QUESTIONS]
    wanted = set()
    for q in questions:
        distractors = [p for p in q["paragraphs"] if not p["is_supporting"]][:1]
        wanted |= {(p["title"], p["paragraph_text"]) for p in q["paragraphs"] if p["is_supporting"]}
        wanted |= {(p["title"], p["paragraph_text"]) for p in distractors}
    wanted_ids = {Passage.make(title, text).id for title, text in wanted}
    corpus = [p for p in read_json(embedded_path("musique_train_corpus.json")) if Passage.make(**p).id in wanted_ids]
    folder = tmp_path_factory.mktemp(TINY_MUSIQUE)
    (folder / "questions.json").write_text(json.dumps(questions))
    (folder / "corpus.json").write_text(json.dumps(corpus))
    return folder / "questions.json", folder / "corpus.json"


@pytest.fixture(scope="module")
def tiny_musique(tiny_musique_files):
    """The name ``musique_tiny``, registered with :func:`glmrag.data.registry.load_dataset` while the module runs.

    A few dozen real MuSiQue passages with their HippoRAG OpenIE triples: DataModules and jobs in this
    process load it by name like musique100, and its index (over :func:`glmrag_cache`) builds in seconds
    where musique100's takes minutes. Subprocesses do not see the name.
    """
    from glmrag.data.embedded_files import materialize
    from glmrag.data.formats.hipporag import load_hipporag
    from glmrag.data.registry import DATASETS, OPENIE_MUSIQUE, DatasetSpec

    def build(_):
        ds = load_hipporag(*tiny_musique_files, TINY_MUSIQUE)
        ds.openie_path = str(materialize(OPENIE_MUSIQUE))  # docs of passages outside the corpus are skipped
        return ds

    about = f"the first {TINY_QUESTIONS} musique100 questions, their supporting passages and one distractor each"
    spec = DatasetSpec(TINY_MUSIQUE, about, tuple(map(str, tiny_musique_files)), build, embedded=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(DATASETS, TINY_MUSIQUE, spec)
        yield TINY_MUSIQUE


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


@pytest.fixture(scope="session")
def train_config():
    """``train_config(overrides, return_hydra_config=False)``: ``configs/train.yaml`` composed by Hydra.

    Each distinct call composes once per test session and hands out a deep copy, so a test may change what
    it gets. Composing costs about 0.3 CPU-seconds, and the experiment, fidelity and sweep tests compose the
    same 44 study runs: once each, not three times. Composed (not run), so ``${glmrag_overrides:}`` adds
    nothing to run names, as with a plain ``hydra.compose``.
    """
    import copy
    import functools
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    configs = Path(__file__).resolve().parents[1] / "configs"

    @functools.cache
    def composed(overrides: tuple[str, ...], return_hydra_config: bool):
        with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
            return compose(config_name="train", overrides=list(overrides), return_hydra_config=return_hydra_config)

    def make(overrides, return_hydra_config: bool = False):
        return copy.deepcopy(composed(tuple(overrides), return_hydra_config))

    return make


@pytest.fixture(scope="session")
def tiny_llama():
    """A factory of tiny random Llama causal LMs (hidden 32, 4 heads over 2 key-value groups), in eval mode.

    ``tiny_llama(vocab_size, **config_overrides)``; seeded, so equal arguments give equal weights.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    def make(vocab_size: int, **overrides):
        config = {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,  # grouped-query: heads 0, 1 share key head 0
            "max_position_embeddings": 256,
        }
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, **(config | overrides))).eval()

    return make


@pytest.fixture
def scripted_llm():
    """A factory of deterministic LLMs for testing methods that call one (DTKG, OpenIE, QA, descriptions).

    ``scripted_llm(reply)``: ``reply(prompt_text) -> str`` answers each prompt, where ``prompt_text`` is a
    plain prompt or a chat's messages joined by newlines. Tokens are counted as words, 0.01 s per
    generation, and ``stop`` strings are applied as the real backends apply them, so usage and
    parsing run through :class:`glmrag.llm.base.LLM` unchanged. ``llm.prompts`` records every prompt text.
    """
    from glmrag.llm.base import LLM, Generation, truncate_at_stop

    class Scripted(LLM):
        name = "scripted"

        def __init__(self, reply) -> None:
            super().__init__()
            self.reply = reply
            self.prompts: list[str] = []

        def _generate(self, prompts, max_new_tokens, temperature, stop):
            out = []
            for p in prompts:
                text = p if isinstance(p, str) else "\n".join(m["content"] for m in p)
                self.prompts.append(text)
                answer, _ = truncate_at_stop(self.reply(text), stop)
                words = answer.split()
                finish = "length" if len(words) > max_new_tokens else "stop"
                out.append(
                    Generation(
                        " ".join(words[:max_new_tokens]) if finish == "length" else answer,
                        len(text.split()),
                        min(len(words), max_new_tokens),
                        finish,
                        0.01,
                    )
                )
            return out

    return Scripted


@pytest.fixture(scope="session")
def cpu_trainer():
    """A factory of quiet, deterministic one-process CPU Trainers; keyword arguments go to ``L.Trainer``.

    No logger, progress bar, model summary or sanity validation: tests read ``callback_metrics`` and the
    values ``validate`` returns.
    """

    def make(**kwargs) -> L.Trainer:
        return L.Trainer(
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            deterministic=True,
            **kwargs,
        )

    return make
