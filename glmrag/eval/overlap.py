"""A checkpoint is scored on questions it did not train on, unless the user asks otherwise, loudly.

A checkpoint written by ``train.py`` carries its DataModule's hyper-parameters
(``datamodule_hyper_parameters``: ``datasets``, ``train_split``, ``val_split``,
``test_split``). :func:`choose_split` reads them for every checkpoint retriever of an
evaluation config:

* ``data.split: null`` on a dataset a checkpoint trained on becomes the checkpoint's
  ``test_split`` (the README's "evaluate a checkpoint" command scored all 100
  MuSiQue-100 questions, 60 of them trained on: R@2 42.6 instead of 38.7 on test);
* a ``data.split`` the checkpoint trained or selected on (``train_split`` /
  ``val_split``) is refused, unless ``allow_train_overlap=true``: then the run goes on
  and its table says, in a warning line, which system saw which questions;
* so is any scored question whose fingerprint the checkpoint records among those it trained
  and validated on (:func:`seen_questions`): the same files under another dataset name, or
  stored splits that do not say what the run read. A question matches in any spelling
  (:func:`~glmrag.data.types.canonical_question`); a checkpoint that records no questions is flagged
  in the table (refused with ``strict_overlap=true``), one that records them by another rule is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from glmrag.data.types import FINGERPRINT_VERSION, Question, question_fingerprint
from glmrag.models.checkpointing import SEEN_QUESTIONS_KEY, SEEN_VERSION_KEY

log = logging.getLogger(__name__)

SEEN_SPLITS = ("train_split", "val_split")
"""A checkpoint's splits it saw: trained on, and selected (early stopping, best checkpoint) on."""


def _load(ckpt_path: str | Path) -> dict[str, Any]:
    return torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)


def checkpoint_data(ckpt_path: str | Path) -> dict[str, Any] | None:
    """The DataModule hyper-parameters stored in a Lightning checkpoint; None when it has none."""
    return _load(ckpt_path).get("datamodule_hyper_parameters")


def recorded_questions(ckpt_path: str | Path) -> tuple[set[str], int] | None:
    """The question fingerprints a checkpoint records as trained or validated on, and the version of the rule
    that made them (1 when unstated); None when it records none."""
    checkpoint = _load(ckpt_path)
    seen = checkpoint.get(SEEN_QUESTIONS_KEY)
    if not seen:
        return None
    return set(seen), int(checkpoint.get(SEEN_VERSION_KEY, 1))


def seen_questions(
    questions: Sequence[Question], retrievers: Mapping[str, Any], allow_overlap: bool = False, strict: bool = False
) -> tuple[dict[str, str], dict[str, str]]:
    """System -> how many of ``questions`` its checkpoint trained or validated on, by the question fingerprints
    the checkpoint records (whatever the dataset is called, whatever split its settings claim, however the
    question is spelt); and system -> why that could not be checked fully, for the table's warning: the
    checkpoint records no questions.

    Raises ``ValueError`` naming the checkpoint, the count, an example and the fix when any is found and
    ``allow_overlap`` is false, or when a check is incomplete and ``strict`` is true.
    """
    found: dict[str, str] = {}
    unchecked: dict[str, str] = {}
    for name, path in _checkpoints(retrievers).items():
        recorded = recorded_questions(path)
        if recorded is None:
            unchecked[name] = "its checkpoint records no questions it trained on"
            continue
        fingerprints, version = recorded
        if version != FINGERPRINT_VERSION:
            raise ValueError(
                f"retriever {name} ({path}) records question fingerprints of version {version}; this glmrag reads "
                f"version {FINGERPRINT_VERSION} only. Evaluate it with the glmrag version that saved it, or retrain it"
            )
        scored = {question_fingerprint(q.question): q for q in questions}
        seen = scored.keys() & fingerprints
        if not seen:
            continue
        example = scored[min(seen)]
        if not allow_overlap:
            raise ValueError(
                f"retriever {name} ({path}) trained or validated on {len(seen)} of the {len(scored)} questions to "
                f"score (e.g. {example.id!r}: {example.question!r}); scoring it there overstates it. Evaluate on "
                "questions it never saw, or pass allow_train_overlap=true to flag the table"
            )
        found[name] = f"{len(seen)} of these {len(scored)} questions"
    if strict and unchecked:
        name, why = next(iter(unchecked.items()))
        raise ValueError(
            f"strict_overlap=true: cannot check retriever {name} ({_checkpoints(retrievers)[name]}) for training "
            f"questions: {why}. Retrain it with this glmrag, or pass strict_overlap=false to flag the table instead"
        )
    for name, why in unchecked.items():
        log.warning("%s: the overlap with its training questions is not fully checked: %s", name, why)
    return found, unchecked


def _checkpoints(retrievers: Mapping[str, Any]) -> dict[str, str]:
    """Retriever name -> checkpoint path, for the retriever configs that load one."""
    return {name: str(node["ckpt_path"]) for name, node in retrievers.items() if node and node.get("ckpt_path")}


def choose_split(
    dataset: str, split: str | None, retrievers: Mapping[str, Any], allow_overlap: bool = False
) -> tuple[str | None, dict[str, str]]:
    """The split to evaluate on, and system -> the seen split it is evaluated on (empty unless allowed).

    Raises ``ValueError`` (naming the checkpoint, its splits and the fix) when ``split`` is
    one a checkpoint trained or selected on and ``allow_overlap`` is false, or when
    ``split`` is None and two checkpoints disagree on their test split.
    """
    held_out: dict[str, str] = {}
    overlap: dict[str, str] = {}
    for name, path in _checkpoints(retrievers).items():
        hp = checkpoint_data(path)
        if not hp or dataset not in hp.get("datasets", []):
            continue
        seen = {hp.get(key) for key in SEEN_SPLITS} - {None}
        if split is None:
            held_out[name] = hp.get("test_split") or "test"
        elif split in seen:
            if not allow_overlap:
                raise ValueError(
                    f"retriever {name} ({path}) trained or selected on the {split!r} split of {dataset}; "
                    f"scoring it there overstates it. Evaluate on its held-out split (data.split="
                    f"{hp.get('test_split') or 'test'}), or pass allow_train_overlap=true to flag the table"
                )
            overlap[name] = f"its {split} split"
    if split is None and held_out:
        splits = set(held_out.values())
        if len(splits) > 1:
            raise ValueError(f"the checkpoints hold out different splits {held_out}; set data.split to one")
        split = splits.pop()
        log.warning(
            "data.split=null: evaluating on %r, the split %s did not train on (data.split=... to choose)",
            split,
            ", ".join(held_out),
        )
    for name, seen in overlap.items():
        log.warning("%s is evaluated on %s (allow_train_overlap=true): its scores are inflated", name, seen)
    return split, overlap


def overlap_note(overlap: Mapping[str, str]) -> str | None:
    """The warning line a report prints for systems evaluated on questions they trained on."""
    if not overlap:
        return None
    parts = ", ".join(f"{name} on {what}" for name, what in overlap.items())
    return f"**Warning: evaluated on questions it trained or selected on ({parts}); its scores are inflated.**"


def unchecked_note(unchecked: Mapping[str, str]) -> str | None:
    """The warning line a report prints for checkpoints whose training questions could not be checked."""
    if not unchecked:
        return None
    parts = "; ".join(f"{name}: {why}" for name, why in unchecked.items())
    return (
        f"**Warning: not checked for questions it trained on ({parts}); its scores may be inflated. "
        "strict_overlap=true refuses such a checkpoint.**"
    )
