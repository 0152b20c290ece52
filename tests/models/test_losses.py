"""The entity-ranking losses against values worked out by hand on 2 questions x 4 entities."""

from __future__ import annotations

import math

import pytest
import torch

from glmrag.models.losses import LISTCE_EPS, gfm_rag_loss, list_ce, masked_list_ce, weighted_bce

LOGITS = [[2.0, 0.0, -1.0, 1.0], [0.5, -0.5, 1.5, 0.0]]
TARGET = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]]


def sigmoid(s: float) -> float:
    return 1.0 / (1.0 + math.exp(-s))


def bce(s: float, y: float) -> float:
    return -(y * math.log(sigmoid(s)) + (1 - y) * math.log(1 - sigmoid(s)))


def hand_weighted_bce(logits, target, temperature):
    rows = []
    for s, y in zip(logits, target, strict=True):
        pos = [i for i in range(len(s)) if y[i] == 1]
        neg = [i for i in range(len(s)) if y[i] == 0]
        z = sum(math.exp(s[i] / temperature) for i in neg)
        total = sum(bce(s[i], 1) / len(pos) for i in pos)
        total += sum(math.exp(s[i] / temperature) / z * bce(s[i], 0) for i in neg)
        rows.append(total / 2)  # the weights sum to 1 + 1
    return sum(rows) / len(rows)


def hand_list_ce(logits, target, eps, scored=None):
    rows = []
    for b, (s, y) in enumerate(zip(logits, target, strict=True)):
        keep = [i for i in range(len(s)) if scored is None or scored[b][i]]
        z = sum(sigmoid(s[i]) for i in keep) + eps
        pos = [i for i in keep if y[i] == 1]
        rows.append(sum(-math.log(sigmoid(s[i]) / z + eps) for i in pos) / len(pos))
    return sum(rows) / len(rows)


def tensors(requires_grad=False):
    return torch.tensor(LOGITS, dtype=torch.double, requires_grad=requires_grad), torch.tensor(TARGET)


def test_weighted_bce_by_hand():
    logits, target = tensors()
    assert weighted_bce(logits, target).item() == pytest.approx(hand_weighted_bce(LOGITS, TARGET, 0.2), abs=1e-12)
    assert weighted_bce(logits, target, temperature=1.0).item() == pytest.approx(
        hand_weighted_bce(LOGITS, TARGET, 1.0), abs=1e-12
    )
    # row 0 by the numbers: positives 2 and 1, negatives 0 and -1 with weights softmax([0, -5])
    w = [1 / (1 + math.exp(-5)), math.exp(-5) / (1 + math.exp(-5))]
    row0 = (0.5 * math.log(1 + math.exp(-2)) + 0.5 * math.log(1 + math.exp(-1))) + (
        w[0] * math.log(2) + w[1] * math.log(1 + math.exp(-1))
    )
    assert weighted_bce(logits[:1], target[:1]).item() == pytest.approx(row0 / 2, abs=1e-12)


def test_weighted_bce_uniform_negatives_at_zero_temperature():
    logits, target = tensors()
    expected = 0.5 * (
        ((bce(2, 1) + bce(1, 1)) / 2 + (bce(0, 0) + bce(-1, 0)) / 2) / 2
        + (bce(1.5, 1) + (bce(0.5, 0) + bce(-0.5, 0) + bce(0, 0)) / 3) / 2
    )
    assert weighted_bce(logits, target, temperature=0).item() == pytest.approx(expected, abs=1e-12)


def test_weighted_bce_weights_carry_no_gradient():
    logits, target = tensors(requires_grad=True)
    weighted_bce(logits, target).backward()
    # d/ds of w * softplus(s) / sum(w), w held fixed, averaged over the 2 questions
    w_neg0 = 1 / (1 + math.exp(-5))
    assert logits.grad[0, 1].item() == pytest.approx(w_neg0 * sigmoid(0.0) / 2 / 2, abs=1e-12)
    assert logits.grad[0, 0].item() == pytest.approx(0.5 * (sigmoid(2.0) - 1) / 2 / 2, abs=1e-12)


@pytest.mark.parametrize("eps", [LISTCE_EPS, 0.0])
def test_list_ce_by_hand(eps):
    logits, target = tensors()
    assert list_ce(logits, target, eps=eps).item() == pytest.approx(hand_list_ce(LOGITS, TARGET, eps), abs=1e-12)


def test_gfm_rag_loss_is_the_weighted_sum():
    logits, target = tensors()
    expected = 0.3 * hand_weighted_bce(LOGITS, TARGET, 0.2) + 0.7 * hand_list_ce(LOGITS, TARGET, LISTCE_EPS)
    assert gfm_rag_loss(logits, target).item() == pytest.approx(expected, abs=1e-12)
    full = torch.ones_like(target, dtype=torch.bool)
    assert masked_list_ce(logits, target, full).item() == pytest.approx(list_ce(logits, target).item(), abs=1e-12)


MASK = [[True, True, False, True], [True, True, True, True]]


def test_masked_list_ce_ignores_unscored_entities():
    logits, target = tensors(requires_grad=True)
    mask = torch.tensor(MASK)
    loss = masked_list_ce(logits, target, mask)
    assert loss.item() == pytest.approx(hand_list_ce(LOGITS, TARGET, LISTCE_EPS, scored=MASK), abs=1e-12)
    loss.backward()
    assert logits.grad[0, 2] == 0 and torch.isfinite(logits.grad).all()

    changed = torch.tensor(LOGITS, dtype=torch.double)
    for value in (50.0, -50.0, float("nan")):
        changed[0, 2] = value
        assert masked_list_ce(changed, target, mask).item() == pytest.approx(loss.item(), abs=1e-12)
        assert gfm_rag_loss(changed, target, mask).item() == pytest.approx(
            gfm_rag_loss(logits.detach(), target, mask).item(), abs=1e-12
        )


def test_list_ce_counts_unscored_entities_as_logit_zero():
    """GLM-RAG App. B.2: each unscored entity still adds sigma(0) = 1/2 to the partition function."""
    logits, target = tensors()
    mask = torch.tensor(MASK)
    zeroed = [row[:] for row in LOGITS]
    zeroed[0][2] = 0.0
    assert list_ce(logits, target, mask).item() == pytest.approx(hand_list_ce(zeroed, TARGET, LISTCE_EPS), abs=1e-12)
    assert list_ce(logits, target, mask).item() > masked_list_ce(logits, target, mask).item()


def test_questions_without_positives_contribute_nothing():
    logits, target = tensors(requires_grad=True)
    target[1] = 0.0
    for loss_fn in (weighted_bce, list_ce, gfm_rag_loss):
        assert loss_fn(logits, target).item() == pytest.approx(loss_fn(logits[:1], target[:1]).item(), abs=1e-12)
    # a positive that was not scored cannot be ranked: that question drops out of the masked ListCE
    mask = torch.tensor([[True, True, True, False], [True, True, False, True]])
    only_first = masked_list_ce(logits[:1], torch.tensor([[1.0, 0, 0, 0]]), mask[:1])
    assert masked_list_ce(logits, tensors()[1], mask).item() == pytest.approx(only_first.item(), abs=1e-12)

    none = torch.zeros_like(target)
    for loss_fn in (weighted_bce, list_ce, gfm_rag_loss):
        logits.grad = None
        loss = loss_fn(logits, none)
        loss.backward()
        assert loss.item() == 0.0 and torch.equal(logits.grad, torch.zeros_like(logits))
    loss = masked_list_ce(logits, none, torch.ones_like(none, dtype=torch.bool))
    assert loss.item() == 0.0


def test_gradients_flow_and_push_positives_up():
    logits, target = tensors(requires_grad=True)
    gfm_rag_loss(logits, target).backward()
    grad = logits.grad
    assert torch.isfinite(grad).all()
    assert (grad[target == 1] < 0).all()  # descending the loss raises every positive
    assert (grad[target == 0] > 0).all()  # and lowers every negative
