"""A trained GLM checkpoint as a retriever in the shared evaluator.

:class:`GLMCheckpointRetriever` loads a :class:`~glmrag.models.glm_module.GLMRetrieverModule`
checkpoint, builds each question's subgraph exactly as the module's DataModule did (the subgraph
settings are hyper-parameters of the checkpoint), scores the subgraph's entities and ranks passages with
the module's document ranker, so the evaluator reproduces ``val/recall@k``. A checkpoint with a prior
(``model.prior``) scores every entity (the prior's logit plus the GLM's) and, with a dense term, ranks
passages by the fused passage logits, as its validation did.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from glmrag.data.types import Corpus, Question
from glmrag.index.embed import Embedder
from glmrag.index.kg import KGIndex
from glmrag.index.ranking import make_rankings, rank_passages, top_k_stable
from glmrag.io import local_checkpoint, verify_checkpoint
from glmrag.models.glm_inputs import GLMCollate, load_tokenizer, question_record
from glmrag.models.glm_module import GLMRetrieverModule, entity_scores
from glmrag.models.gnn_input_cache import cached_passage_embeddings
from glmrag.nn.glm_retriever import GLMInputs
from glmrag.nn.prior import PriorKG, prior_kg
from glmrag.retrievers.base import Ranking


class GLMCheckpointRetriever:
    """Rank passages with a trained GLM checkpoint.

    Args:
        ckpt_path: a Lightning checkpoint of :class:`GLMRetrieverModule`.
        batch_size: subgraphs per forward pass.
        device: where the GLM runs (``cpu``, ``cuda``).
        ranker, top_entities: document ranker (None: the checkpoint's).
    """

    name = "glm_checkpoint"

    def __init__(
        self,
        ckpt_path: str,
        batch_size: int = 4,
        device: str = "cpu",
        ranker: str | None = None,
        top_entities: int | None = None,
    ) -> None:
        self.ckpt_path = str(ckpt_path)
        """The checkpoint, for the evaluator's training-overlap guard (:func:`glmrag.eval.overlap.seen_questions`)."""
        self.device = torch.device(device)
        self.module = GLMRetrieverModule.load_from_checkpoint(
            verify_checkpoint(local_checkpoint(ckpt_path)), map_location=self.device, weights_only=True
        )
        self.module.eval()
        evaluation = self.module.evaluation
        self.ranker = ranker or evaluation.ranker
        self.top_entities = top_entities or evaluation.top_entities
        self.batch_size = batch_size
        self.tokenizer = load_tokenizer(self.module.config.tokenizer)
        self.embedder = Embedder(self.module.hparams.embed_model)
        self.settings = self.module.subgraph_settings()
        self.collate = GLMCollate(self.settings.position_mode, position_conflict=self.settings.position_conflict)
        self._kg: tuple[KGIndex, PriorKG] | None = None  # the last index and its PriorKG (a prior's checkpoint)

    def prior_kg(self, index: KGIndex, corpus: Corpus | None) -> PriorKG:
        """The :class:`~glmrag.nn.prior.PriorKG` of ``index`` (built once per index); ``corpus``: its passages, for
        a prior's dense term."""
        if self._kg is None or self._kg[0] is not index:
            passage_emb = None
            if self.module.has_dense_term:
                if corpus is None:
                    raise ValueError("this checkpoint's prior has a dense term: pass the corpus of the index")
                passage_emb = cached_passage_embeddings(corpus, index, self.module.hparams.embed_model)  # (P, d)
            self._kg = (index, prior_kg(index, passage_emb).to(self.device))
        return self._kg[1]

    def entity_scores(
        self,
        questions: Sequence[Question],
        index: KGIndex,
        corpus: Corpus | None = None,
        question_emb: np.ndarray | None = None,
    ) -> np.ndarray:
        """Scores of every entity for each question; ``-inf`` outside its subgraph, or with a prior the prior's
        logit there. ``corpus``: the index's passages, needed only by a prior with a dense term;
        ``question_emb``: the questions' embeddings, when the caller has them.

        Shapes: questions (Q,), **question_emb** ``(Q, d)`` -> (Q, E) float64.
        """
        kg = None if self.module.prior is None else self.prior_kg(index, corpus)
        if question_emb is None:
            question_emb = self.embedder.encode([q.question for q in questions])  # (Q, d)
        out = np.full((len(questions), index.num_entities), -np.inf)
        with torch.inference_mode():
            for start in range(0, len(questions), self.batch_size):
                chunk = range(start, min(start + self.batch_size, len(questions)))
                records = [
                    question_record(index, questions[i], "eval", self.tokenizer, self.settings, question_emb[i])
                    for i in chunk
                ]
                batch = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in self.collate(records).items()}
                logits = self.module(GLMInputs.from_batch(batch)).float()  # (b, N)
                if kg is not None:
                    fused = self.module.fused_entity_logits(batch, logits, list(range(len(chunk))), index, kg)
                    out[chunk.start : chunk.stop] = fused.cpu().numpy()  # (b, E)
                    continue
                logits = logits.cpu().numpy()
                entity_of_node, node_mask = batch["entity_of_node"].cpu().numpy(), batch["node_mask"].cpu().numpy()
                for row, i in enumerate(chunk):
                    out[i] = entity_scores(logits[row], entity_of_node[row], node_mask[row], index.num_entities)
        return out

    def retrieve(self, questions: Sequence[Question], index: KGIndex, corpus: Corpus, top_k: int = 10) -> list[Ranking]:
        """One Ranking per question: the ``top_k`` best passages and the ``top_entities`` best entities."""
        if len(corpus) != index.num_passages:
            raise ValueError(f"the index has {index.num_passages} passages but the corpus {len(corpus)}")
        questions = list(questions)
        question_emb = self.embedder.encode([q.question for q in questions])  # (Q, d), for the GLM and the dense term
        scores = self.entity_scores(questions, index, corpus, question_emb)  # (Q, E)
        if self.module.has_dense_term:  # a prior's fused passage logits rank the passages, as in validation
            with torch.inference_mode():
                logits = torch.from_numpy(scores).float().to(self.device)  # (Q, E), exact: float32 values
                query = torch.from_numpy(question_emb).to(self.device)  # (Q, d)
                fused = self.module.passage_scores(logits, self.prior_kg(index, corpus), query)  # (Q, P)
            positions, passage_scores = top_k_stable(fused.cpu().numpy(), top_k)  # (Q, k)
        else:
            positions, passage_scores = rank_passages(scores, index, top_k, self.ranker, self.top_entities)  # (Q, k)
        entities, values = top_k_stable(scores, self.top_entities)  # (Q, top_entities)
        return make_rankings([q.id for q in questions], index.passage_ids, positions, passage_scores, entities, values)
