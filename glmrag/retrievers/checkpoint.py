"""A checkpoint of ``train.py`` as a retriever in the shared evaluator.

:class:`CheckpointRetriever` loads the module class that saved the checkpoint (it records its class:
:func:`~glmrag.models.retriever_module.saved_module_class`), gives it the evaluator's index as its one KG
(:class:`IndexKG`), and ranks the questions with the module's own
:meth:`~glmrag.models.retriever_module.RetrieverModule.question_batch` and
:meth:`~glmrag.models.retriever_module.RetrieverModule.rank`: the batches and the ranking of its validation, so the
evaluator reproduces ``val/recall@k``. Nothing here scores. The checkpoint is loaded with Lightning's
``load_from_checkpoint`` (``torch.load`` with ``weights_only``: tensors and plain values only). What ranks is
:class:`ModuleRetriever`, shared with GFM-RAG's released checkpoints (:mod:`glmrag.retrievers.gfmrag_checkpoint`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from glmrag.data.types import Corpus, Question
from glmrag.datamodules.gnn_input_cache import cached_graph_inputs, cached_passage_embeddings, default_inputs_cache_dir
from glmrag.index.embed import Embedder
from glmrag.index.kg import KGIndex
from glmrag.io import load_checkpoint_dict, local_checkpoint
from glmrag.models.retriever_module import RetrieverModule, saved_module_class
from glmrag.nn.graph_inputs import GraphInputs
from glmrag.retrievers.base import Ranking

KG = "index"
"""The name under which the module reads the evaluator's index."""
MODEL_HPARAMS = ("embed_model", "glm.encoder", "glm.tokenizer")
"""Hyper-parameters of a checkpoint that name a pretrained model its retriever loads (``node.field``: nested)."""


def named_models(hparams: dict) -> dict[str, str]:
    """The :data:`MODEL_HPARAMS` of a checkpoint's hyper-parameters that are set."""
    out = {}
    for key in MODEL_HPARAMS:
        node, _, name = key.rpartition(".")
        value = (hparams.get(node) or {}).get(name) if node else hparams.get(key)
        if isinstance(value, str):
            out[key] = value
    return out


class IndexKG:
    """The KG source (:class:`~glmrag.datamodules.kg_source.GraphSource`) of one index and its corpus, built as the
    DataModules build theirs: graph inputs by ``embed_model`` (with the entity embeddings when ``node_features``)
    cached in ``cache_dir``, passage embeddings in the dense retriever's cache."""

    def __init__(self, index: KGIndex, corpus: Corpus, embed_model: str, node_features: bool, cache_dir: str) -> None:
        self.kg_index, self.corpus, self.embed_model = index, corpus, embed_model
        self.node_features, self.cache_dir = node_features, cache_dir

    def index(self, kg: str) -> KGIndex:
        return self.kg_index

    def graph(self, kg: str) -> GraphInputs:
        return cached_graph_inputs(self.kg_index, self.embed_model, self.node_features, self.cache_dir)

    def passage_embeddings(self, kg: str) -> torch.Tensor:
        return cached_passage_embeddings(self.corpus, self.kg_index, self.embed_model)


class ModuleRetriever:
    """Rank passages with a retriever module on the evaluator's index: the module's own
    :meth:`~glmrag.models.retriever_module.RetrieverModule.question_batch` and
    :meth:`~glmrag.models.retriever_module.RetrieverModule.rank`, questions embedded by ``embedder``.

    Args:
        module: the loaded module (a GNN, a GLM).
        embedder: the sentence encoder of the questions (the module's ``embed_model``).
        ranker, top_entities: the document ranker and the entities it reads (None: the module's own
            ``evaluation``); the ``top_entities`` best entities and their scores are also returned in each Ranking.
        batch_size: questions per forward pass.
        cache_dir: folder of the cached GNN inputs (None: ``$GLMRAG_CACHE_DIR/gnn_inputs``, the DataModule's).
    """

    def __init__(
        self,
        module: RetrieverModule,
        embedder: Embedder,
        ranker: str | None = None,
        top_entities: int | None = None,
        batch_size: int = 4,
        cache_dir: str | None = None,
    ) -> None:
        self.module = module.eval()
        self.embedder = embedder
        evaluation = module.evaluation
        module.evaluation = replace(
            evaluation, ranker=ranker or evaluation.ranker, top_entities=top_entities or evaluation.top_entities
        )
        self.batch_size = batch_size
        self.cache_dir = cache_dir or default_inputs_cache_dir()

    def kg_source(self, index: KGIndex, corpus: Corpus) -> IndexKG:
        """The KG source the module reads ``index`` from: glmrag's graph inputs of its ``embed_model``."""
        node_features = getattr(self.module.config, "use_node_features", False)  # a GNN+ reads entity embeddings
        return IndexKG(index, corpus, self.module.hparams.embed_model, node_features, self.cache_dir)

    def use(self, index: KGIndex, corpus: Corpus) -> None:
        """Give the module ``index`` (built from ``corpus``) as its KG; its caches of another index are dropped."""
        kgs = self.module.kgs
        if isinstance(kgs, IndexKG) and kgs.kg_index is index:
            return
        self.module.kgs = self.kg_source(index, corpus)
        self.module.setup("predict")

    def retrieve(self, questions: Sequence[Question], index: KGIndex, corpus: Corpus, top_k: int = 10) -> list[Ranking]:
        """One Ranking per question: the ``top_k`` best passages and the ``top_entities`` best entities."""
        if len(corpus) != index.num_passages:
            raise ValueError(f"the index has {index.num_passages} passages but the corpus {len(corpus)}")
        questions = list(questions)
        self.use(index, corpus)
        question_emb = self.embedder.encode([q.question for q in questions])  # (Q, d)
        rankings = []
        with torch.inference_mode():
            for start in range(0, len(questions), self.batch_size):
                chunk = slice(start, start + self.batch_size)
                batch = self.module.question_batch(questions[chunk], KG, question_emb[chunk])
                rankings += self.module.rank(self.module.transfer_batch_to_device(batch, self.module.device, 0), top_k)
        return rankings


class CheckpointRetriever(ModuleRetriever):
    """Rank passages with a trained checkpoint (a GNN, a GLM: whichever module saved it).

    Args:
        ckpt_path: a Lightning checkpoint written by ``train.py``.
        ranker, top_entities: the document ranker and the entities it reads (None: the checkpoint's own
            ``evaluation``, the one its validation used); the ``top_entities`` best entities and their scores are
            also returned in each Ranking.
        batch_size: questions per forward pass.
        device: where the module runs (``cpu``, ``cuda``, ``cuda:1``).
        cache_dir: folder of the cached GNN inputs, shared with ``KGQADataModule.inputs_cache_dir`` (None:
            ``$GLMRAG_CACHE_DIR/gnn_inputs``, the DataModule's default).
    """

    name = "checkpoint"

    def __init__(
        self,
        ckpt_path: str,
        ranker: str | None = None,
        top_entities: int | None = None,
        batch_size: int = 4,
        device: str = "cpu",
        cache_dir: str | None = None,
    ) -> None:
        self.ckpt_path = str(ckpt_path)
        """The checkpoint, for the evaluator's training-overlap guard (:func:`glmrag.eval.overlap.seen_questions`)."""
        checkpoint = load_checkpoint_dict(ckpt_path)
        path = local_checkpoint(ckpt_path)
        try:
            module = saved_module_class(checkpoint, path).load_from_checkpoint(
                path, map_location=torch.device(device), weights_only=True
            )
            embedder = Embedder(module.hparams.embed_model)
        except OSError as err:  # transformers / sentence-transformers / huggingface_hub raise OSError subclasses
            raise OSError(
                f"the checkpoint {ckpt_path} needs the model(s) {named_models(checkpoint['hyper_parameters'])}, which "
                f"could not be loaded from disk ({type(err).__name__}: {str(err)[:200]}); put them in the local "
                "Hugging Face cache, or name a local path or an offline: model when training"
            ) from err
        super().__init__(module, embedder, ranker, top_entities, batch_size, cache_dir)
