"""Entity resolution by embedding similarity: synonym edges and question-entity links.

Both are nearest-neighbour searches over the (E, d) unit-norm entity
embeddings, done in blocks of rows so that no (E, E) matrix is ever held:
a block of ``b`` rows costs ``b * E`` floats (about 128 MB by default).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from glmrag.data.types import Question
from glmrag.index.extractors.spacy_extractor import SKIP_LABELS, load_nlp, mention_spans
from glmrag.index.kg import EntityLink
from glmrag.index.normalize import normalize_phrase

_BLOCK_FLOATS = 1 << 25


def _block_rows(n_cols: int, chunk_rows: int | None) -> int:
    return chunk_rows or max(1, _BLOCK_FLOATS // max(n_cols, 1))


def synonym_pairs(
    emb: np.ndarray,
    threshold: float,
    top_k: int,
    eligible: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    chunk_rows: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Directed synonym pairs ``(i, j)`` with their cosine, as GFM-RAG's ``augment_graph`` adds them.

    For every entity ``i`` (only those with ``eligible[i]``, when given), the
    at most ``top_k`` other entities ``j`` with ``cos(i, j) >= threshold``
    (and ``groups[i] == groups[j]``, when given), most similar first, ties
    broken by the smaller ``j``. Mutual neighbours
    therefore give both ``(i, j)`` and ``(j, i)``.

    Shapes: ``emb`` (E, d) unit rows -> pairs (S, 2) int64, scores (S,) float32,
    sorted by ``i`` then descending score.
    """
    n = len(emb)
    step = _block_rows(n, chunk_rows)
    pairs, scores = [], []
    for start in range(0, n, step):
        block = emb[start : start + step] @ emb.T  # (b, E)
        b = len(block)
        block[np.arange(b), np.arange(start, start + b)] = -np.inf  # no self loops
        rows, cols = np.nonzero(block >= threshold)
        sims = block[rows, cols]
        rows = rows + start
        keep = np.ones(len(rows), dtype=bool)
        if eligible is not None:
            keep &= eligible[rows]
        if groups is not None:
            keep &= groups[rows] == groups[cols]
        rows, cols, sims = rows[keep], cols[keep], sims[keep]
        order = np.lexsort((cols, -sims, rows))  # row, then score descending, then column
        rows, cols, sims = rows[order], cols[order], sims[order]
        rank = np.arange(len(rows)) - np.searchsorted(rows, rows, side="left")
        keep = rank < top_k
        pairs.append(np.stack([rows[keep], cols[keep]], axis=1))
        scores.append(sims[keep])
    if not pairs:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.float32)
    return np.concatenate(pairs).astype(np.int64), np.concatenate(scores).astype(np.float32)


def nearest(queries: np.ndarray, keys: np.ndarray, chunk_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Index and cosine of the most similar key for every query (first index on ties).

    Shapes: ``queries`` (M, d), ``keys`` (E, d), both unit rows -> (M,) int64, (M,) float32.
    """
    if len(keys) == 0:
        raise ValueError("cannot link to an empty entity vocabulary")
    step = _block_rows(len(keys), chunk_rows)
    best, score = [], []
    for start in range(0, len(queries), step):
        block = queries[start : start + step] @ keys.T  # (b, E)
        idx = block.argmax(axis=1)
        best.append(idx)
        score.append(block[np.arange(len(block)), idx])
    if not best:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    return np.concatenate(best).astype(np.int64), np.concatenate(score).astype(np.float32)


def question_mentions(
    questions: Sequence[Question], spacy_model: str, skip_labels: tuple[str, ...] = SKIP_LABELS
) -> list[list[str]]:
    """Entity mentions of every question: NER entities and noun chunks, as for passages.

    Mentions are de-duplicated by their normalised form, in text order. A
    question with no mention gets the whole question as its only mention, so
    every question can be linked.
    """
    nlp = load_nlp(spacy_model)
    out = []
    for q, doc in zip(questions, nlp.pipe(q.question for q in questions), strict=True):
        seen: dict[str, str] = {}
        for span in mention_spans(doc, skip_labels):
            if (key := normalize_phrase(span.text)) and key not in seen:
                seen[key] = span.text
        out.append(list(seen.values()) or [q.question])
    return out


def link_mentions(
    mentions: list[list[str]],
    entities: list[str],
    entity_emb: np.ndarray | None,
    encode,
    min_score: float = 0.0,
) -> list[list[EntityLink]]:
    """Link each mention to its most similar entity, per question, de-duplicated by entity.

    With embeddings, ``encode`` (texts -> unit rows) embeds the normalised
    mentions and each is linked to the entity of highest cosine; links below
    ``min_score`` are dropped unless that would leave the question with none,
    in which case its best link is kept. Without embeddings (``entity_emb`` is
    None), a mention links only to the entity of the same normalised phrase,
    with score 1.0. When two mentions link to one entity, the higher score is
    kept at the position of the first mention.
    """
    flat = [normalize_phrase(m) or m for ms in mentions for m in ms]
    if entity_emb is not None:
        best, score = nearest(encode(flat), entity_emb)
    else:
        ids = {e: i for i, e in enumerate(entities)}
        best = np.array([ids.get(m, -1) for m in flat], dtype=np.int64)
        score = np.where(best >= 0, 1.0, 0.0).astype(np.float32)
    out, k = [], 0
    for ms in mentions:
        links: dict[int, EntityLink] = {}
        for m in ms:
            e, s = int(best[k]), float(score[k])
            k += 1
            if e >= 0 and (e not in links or s > links[e].score):
                links[e] = EntityLink(m, e, s)
        kept = [link for link in links.values() if link.score >= min_score]
        if not kept and links:
            kept = [max(links.values(), key=lambda link: link.score)]
        out.append(kept)
    return out
