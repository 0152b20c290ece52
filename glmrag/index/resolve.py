"""Entity resolution by embedding similarity: synonym edges and question-entity links.

Both are nearest-neighbour searches over the (E, d) unit-norm entity
embeddings, done in blocks of rows so that no (E, E) matrix is ever held:
a block of ``b`` rows costs ``b * E`` floats (about 128 MB by default). Synonym
search over a large group switches to an approximate search (:mod:`glmrag.index.ann`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from glmrag.data.types import Question
from glmrag.index import extractors  # spaCy is loaded when questions are first parsed, not on import
from glmrag.index.ann import ivf_candidates
from glmrag.index.extractors.base import SKIP_LABELS
from glmrag.index.kg import EntityLink
from glmrag.index.normalize import normalize_phrase
from glmrag.progress import stage_progress

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
    exact_max: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Directed synonym pairs ``(i, j)`` with their cosine, as GFM-RAG's ``augment_graph`` adds them.

    For every entity ``i`` (only those with ``eligible[i]``, when given), the
    at most ``top_k`` other entities ``j`` with ``cos(i, j) >= threshold``
    (and ``groups[i] == groups[j]``, when given), most similar first, ties
    broken by the smaller ``j``. Mutual neighbours
    therefore give both ``(i, j)`` and ``(j, i)``.

    Only eligible rows are scored, and with ``groups`` each group is searched on its own (pairs
    across groups cannot qualify). A group of at most ``exact_max`` members (all groups when None)
    is searched exactly, in blocks (no (m, m) matrix is held): ``eligible_g * size_g * d``, quadratic
    in the group. A larger group is searched approximately (:func:`glmrag.index.ann.ivf_candidates`,
    near-linear in ``m``): every pair it returns qualifies, but a qualifying pair can be missed.

    Shapes: ``emb`` (E, d) unit rows -> pairs (S, 2) int64, scores (S,) float32,
    sorted by ``i`` then descending score.
    """
    n = len(emb)
    eligible = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if groups is None:
        members_of = [np.arange(n)]
    else:
        order = np.argsort(groups, kind="stable")  # members of a group stay in ascending id order
        cuts = np.flatnonzero(np.diff(groups[order])) + 1
        members_of = np.split(order, cuts) if n else []
    members_of = [m for m in members_of if len(m) >= 2 and eligible[m].any()]
    pairs, scores = [], []
    total = sum(int(eligible[m].sum()) for m in members_of)
    with stage_progress("synonym search", total, unit="entity") as advance:
        for members in members_of:
            if exact_max is not None and len(members) > exact_max:
                rows, cols, sims = ivf_candidates(emb[members], np.flatnonzero(eligible[members]), threshold, advance)
                found, sims = _top_k_per_row(members[rows], members[cols], sims, top_k)
                pairs.append(found)
                scores.append(sims)
                continue
            queries = members[eligible[members]]
            keys = emb[members]  # (m, d)
            step = _block_rows(len(members), chunk_rows)
            for start in range(0, len(queries), step):
                rows = queries[start : start + step]  # (b,) entity ids
                block = emb[rows] @ keys.T  # (b, m)
                block[np.arange(len(rows)), np.searchsorted(members, rows)] = -np.inf  # no self loops
                r, c = np.nonzero(block >= threshold)
                # a row lives in exactly one block, so its top-k is final here (memory: O(b * top_k) kept)
                found, sims = _top_k_per_row(rows[r], members[c], block[r, c], top_k)
                pairs.append(found)
                scores.append(sims)
                advance(len(rows))
    if not pairs:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.float32)
    found, sims = np.concatenate(pairs), np.concatenate(scores)
    order = np.lexsort((found[:, 1], -sims, found[:, 0]))  # row, then score descending, then column
    return found[order], sims[order]


def _top_k_per_row(rows: np.ndarray, cols: np.ndarray, sims: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``top_k`` best ``(row, col)`` of each row: highest score first, ties to the smaller column.

    Shapes: (n,) each -> pairs (s, 2) int64 sorted by row, score descending, column; scores (s,) float32.
    """
    order = np.lexsort((cols, -sims, rows))
    rows, cols, sims = rows[order], cols[order], sims[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, rows, side="left")
    keep = rank < top_k
    return np.stack([rows[keep], cols[keep]], axis=1).astype(np.int64), sims[keep].astype(np.float32)


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
    nlp = extractors.load_nlp(spacy_model)
    out = []
    for q, doc in zip(questions, nlp.pipe(q.question for q in questions), strict=True):
        seen: dict[str, str] = {}
        for span in extractors.mention_spans(doc, skip_labels):
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
    fallback: bool = True,
) -> list[list[EntityLink]]:
    """Link each mention to its most similar entity, per question, de-duplicated by entity.

    With embeddings, ``encode`` (texts -> unit rows) embeds the normalised
    mentions and each is linked to the entity of highest cosine; links below
    ``min_score`` are dropped; a question left with none keeps its best link
    when ``fallback``, else it has no link. Without embeddings (``entity_emb`` is
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
        if not kept and links and fallback:
            kept = [max(links.values(), key=lambda link: link.score)]
        out.append(kept)
    return out
