"""Entity-ranking losses of GFM-RAG and GLM-RAG.

All losses take ``logits`` and ``target`` of shape ``(B, E)`` (one row per
question, one column per entity; ``target`` is 1 at the supporting entities)
and an optional ``mask`` ``(B, E)`` bool marking the entities that were scored:
all of them for the GNN, the subgraph entities for the GLM (GLM-RAG App. B.2).

A question without a (scored) positive entity has nothing to rank and
contributes 0: each loss is the mean over the questions that have one, and 0
(still attached to the graph) when none has.

GFM-RAG finetunes with ``0.3 * BCE + 0.7 * ListCE`` (GLM-RAG Table 14, alpha =
0.3 for GFM-RAG(*, +)); the GLM retriever with 0.44 and 0.56 (App. B list).
:func:`passage_list_ce` (glmrag's, not in the papers) scores the passages the ``softmax_sum`` ranker ranks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

LISTCE_EPS = 1e-5
"""The two epsilons of GFM-RAG's released ListCE, ``-log(p / (sum p + eps) + eps)`` (gfmrag/losses.py, ListCELoss)."""


def _mask_like(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return torch.ones_like(logits, dtype=torch.bool)
    if mask.shape != logits.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected the logits' {tuple(logits.shape)}")
    return mask.bool()


def _mean_over(rows: torch.Tensor, valid: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Mean of ``rows`` (B,) where ``valid``; 0 attached to ``logits`` when no row is valid."""
    if not bool(valid.any()):
        return logits.sum() * 0.0
    return rows[valid].mean()


def weighted_bce(
    logits: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 0.2,
) -> torch.Tensor:
    """Binary cross-entropy with self-adversarial weights on the negatives (GFM-RAG).

    Per question, each positive is weighted ``1 / #positives`` and the negatives
    by ``softmax(logit / temperature)`` over the negatives, computed without
    gradient (self-adversarial sampling, Sun et al. 2019, as in NBFNet and
    GFM-RAG's ``BCELoss`` with ``adversarial_temperature: 0.2``). The question's
    loss is the weighted mean ``sum(w * bce) / sum(w)``, so positives and
    negatives each carry half of it. ``temperature <= 0`` weights the negatives
    uniformly. Unscored entities (``mask`` False) take no part.

    Shapes: **logits**, **target**, **mask** ``(B, E)`` -> scalar.
    """
    mask = _mask_like(logits, mask)
    logits = logits.masked_fill(~mask, 0.0)  # unscored entries (even NaN) get weight 0 and no gradient
    target = target.to(logits.dtype)
    positive = (target > 0.5) & mask  # (B, E)
    negative = (target <= 0.5) & mask  # (B, E)
    bce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")  # (B, E)

    num_pos = positive.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
    weight = positive.to(logits.dtype) / num_pos  # (B, E)
    with torch.no_grad():
        if temperature > 0:
            neg_logits = (logits / temperature).masked_fill(~negative, float("-inf"))
            neg_weight = torch.softmax(neg_logits, dim=-1).nan_to_num(0.0)  # a row without negatives gives NaN
        else:
            neg_weight = negative.to(logits.dtype) / negative.sum(-1, keepdim=True).clamp(min=1)
        weight = weight + neg_weight * negative  # (B, E)
    rows = (weight * bce).sum(-1) / weight.sum(-1).clamp(min=torch.finfo(logits.dtype).tiny)  # (B,)
    return _mean_over(rows, positive.any(-1), logits)


def _list_ce(
    logits: torch.Tensor, target: torch.Tensor, in_partition: torch.Tensor, positive: torch.Tensor, eps: float
) -> torch.Tensor:
    """``-sum_pos t_i log(sigma(s_i) / Z + eps) / sum_pos t_i`` with ``Z = sum_{partition} sigma(s_j) + eps``."""
    weight = target.to(logits.dtype) * positive  # (B, E)
    if eps > 0:
        prob = torch.sigmoid(logits) * in_partition  # (B, E)
        z = prob.sum(-1, keepdim=True) + eps  # (B, 1)
        nll = -torch.log(prob / z + eps)  # (B, E)
    else:  # the exact sigmoid-form ListCE, in log space
        log_prob = F.logsigmoid(logits).masked_fill(~in_partition, float("-inf"))  # (B, E)
        nll = torch.logsumexp(log_prob, dim=-1, keepdim=True) - log_prob  # (B, E)
    nll = nll.masked_fill(~positive, 0.0)  # keep -log(0) = inf of non-positives out of the sum
    rows = (weight * nll).sum(-1) / weight.sum(-1).clamp(min=torch.finfo(logits.dtype).tiny)  # (B,)
    return _mean_over(rows, weight.sum(-1) > 0, logits)


def list_ce(
    logits: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor | None = None,
    eps: float = LISTCE_EPS,
) -> torch.Tensor:
    r"""GFM-RAG's ListCE in sigmoid form (Bai et al. 2023), over the whole entity set.

    .. math::
        \mathcal{L} = -\frac{1}{|P|} \sum_{i \in P} \log\Big(\frac{\sigma(s_i)}
        {\sum_{j \in V} \sigma(s_j) + \epsilon} + \epsilon\Big)

    with P the positives of a question and V all E entities (GLM-RAG App. B.2,
    Eq. for L_ListCE; ``eps`` as in GFM-RAG's released code, 0 for the exact
    form). This is the loss GLM-RAG App. B.2 argues against for subgraph
    scorers: an unscored entity (``mask`` False) is given the logit 0 a
    subgraph scorer leaves it and still adds ``sigma(0) = 1/2`` to the
    partition function. Use :func:`masked_list_ce` to leave it out.

    Shapes: **logits**, **target**, **mask** ``(B, E)`` -> scalar.
    """
    mask = _mask_like(logits, mask)
    logits = logits.masked_fill(~mask, 0.0)
    everything = torch.ones_like(mask)
    return _list_ce(logits, target, everything, target > 0.5, eps)


def masked_list_ce(
    logits: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    eps: float = LISTCE_EPS,
) -> torch.Tensor:
    """ListCE normalised over the scored entities only (GLM-RAG App. B.2, "Adjustment of the Losses").

    Unscored entities (``mask`` False) are left out of the partition function
    and their logits have no effect; a positive that was not scored cannot be
    ranked and is left out too. With an all-True mask this equals
    :func:`list_ce`.

    Shapes: **logits**, **target**, **mask** ``(B, E)`` -> scalar.
    """
    mask = _mask_like(logits, mask)
    logits = logits.masked_fill(~mask, 0.0)  # keeps NaN/inf of unscored entries out of the gradient
    return _list_ce(logits, target, mask, (target > 0.5) & mask, eps)


def gfm_rag_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor | None = None,
    bce_weight: float = 0.3,
    listce_weight: float = 0.7,
    temperature: float = 0.2,
) -> torch.Tensor:
    """``bce_weight * weighted_bce + listce_weight * ListCE``: GFM-RAG's finetuning loss.

    The weights 0.3 / 0.7 and the adversarial temperature 0.2 are GFM-RAG's
    (GLM-RAG Table 14, alpha = 0.3; GFM-RAG ``stage2_qa_finetune.yaml``); the
    GLM retriever uses 0.44 / 0.56 (GLM-RAG App. B). The ListCE term is
    :func:`masked_list_ce`, which equals GFM-RAG's :func:`list_ce` when every
    entity is scored (``mask`` None) and follows GLM-RAG App. B.2 when not.

    Shapes: **logits**, **target**, **mask** ``(B, E)`` -> scalar.
    """
    mask = _mask_like(logits, mask)
    bce = weighted_bce(logits, target, mask, temperature)
    return bce_weight * bce + listce_weight * masked_list_ce(logits, target, mask)


def passage_list_ce(passage_logits: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    r"""ListCE over passages (glmrag's, not in the papers): ``-\frac{1}{|G|} \sum_{g \in G} \log softmax(r)_g``
    for the gold passages G of a question, ``r`` its passage logits (:func:`glmrag.nn.prior.passage_logits`:
    the log of the mass the ``softmax_sum`` ranker gives each passage, plus the dense term). The entity losses
    reward every entity of a gold passage; this one the passages that recall@k counts.

    Shapes: **passage_logits** ``(B, P)``, **gold** ``(B, P)`` bool -> scalar.
    """
    nll = -torch.log_softmax(passage_logits, dim=-1).masked_fill(~gold, 0.0)  # (B, P)
    rows = nll.sum(-1) / gold.sum(-1).clamp(min=1)  # (B,)
    return _mean_over(rows, gold.any(-1), passage_logits)
