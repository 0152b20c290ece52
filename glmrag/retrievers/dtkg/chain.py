"""The chained reasoning track (DTKG §3.3.2, Eqs. 9-14): a layer-by-layer path search from a central entity.

:class:`ChainTrack` links the question's central entity, expands paths over its head and tail triples one
layer at a time (scored by the two-stage scorer, screened by the denoiser, chosen by width or by the LLM),
asks after each layer whether the paths suffice, and answers from the best paths. The triples of those
paths are what it used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glmrag.data.types import Question
from glmrag.index.kg import KGIndex
from glmrag.llm.parse import parse_choice, parse_json
from glmrag.retrievers.dtkg import prompts
from glmrag.retrievers.dtkg.evidence import TrackResult, relation_label, triple_text, triples_of
from glmrag.retrievers.dtkg.linking import clean_mention
from glmrag.retrievers.dtkg.rerank import read_order
from glmrag.retrievers.dtkg.track import Track, first_line, link_trace


@dataclass(frozen=True)
class Path:
    """``e0 -r1-> e1 ... -rk-> ek``: its entities, triple rows, and score (Eq. 12)."""

    entities: tuple[int, ...]
    triples: tuple[int, ...]
    score: float

    def extend(self, row: int, entity: int, relation_score: float) -> Path:
        return Path((*self.entities, entity), (*self.triples, row), self.score * relation_score)


def path_score(relation_scores) -> float:
    """Eq. 12: the product of the path's relation scores (1 for the empty path)."""
    return float(np.prod(np.asarray(relation_scores, dtype=np.float64)))


class ChainTrack(Track):
    """DTKG's chained track; its steps (``s`` its :class:`~glmrag.retrievers.dtkg.settings.DTKGSettings`):

    1. ``e0``: the entity the LLM names, linked by Eq. 5; an empty name (``central_fallback``) or an unlinked
       one (``unlinked_mention``) falls back to the question's first seed entity (``seed_fallback``), else,
       for an empty name, to linking the question text; no entity at all gives no path (``no_path``).
    2. Each layer's candidates are the head and tail triples of every path's last entity (Eqs. 9-11), except
       those back onto the path, scored as triple text (an OpenIE relation phrase alone rarely pins the hop
       down); a path scores the product of its relation scores (Eq. 12).
    3. Relations below θ are dropped (not with ``denoise="none"``: Table 4's baseline filters nothing). A
       step with more than ``s.select_trigger`` candidates lets the LLM pick at most ``s.select_max``
       (unreadable: ``select_fallback``); otherwise the ``s.max_width`` best paths go on. The width counts
       over all paths of the step, the O(D W) bound of App. A.7, so the search runs one layer at a time.
    4. ``task_aware`` denoising then drops chosen relations the LLM finds unnecessary (Eq. 16).
    5. Below ``s.max_depth`` the LLM judges whether the layer's paths suffice (Eq. 13); ``yes`` stops.
    6. The answer reads the triples of the ``s.answer_paths`` best paths of the last layer, ``P*`` (Eq. 14);
       an empty answer falls back to the best path's last entity (``answer_fallback``).
    """

    def central_entity(self, question: Question, index: KGIndex) -> int | None:
        """``e0`` (step 1); records the link in ``self.central``."""
        name = clean_mention(
            self.llm.complete(prompts.central_entity(question.question), max_new_tokens=12, stop=["\n"])
        )
        linker = self.linker(index)
        link = linker.link(name) if name else None
        self.central = link_trace(index, name, linker.best(name) if name else None, link is not None)
        if link is not None:
            return link.entity
        self.llm.usage.count("unlinked_mention" if name else "central_fallback")
        seeds = index.seeds(question.id)
        if seeds:
            self.llm.usage.count("seed_fallback")
            self.central["fallback"] = "seed"
            return seeds[0]
        link = linker.link(question.question) if not name else None
        self.central["fallback"] = "question_text" if link is not None else "none"
        return None if link is None else link.entity

    def candidates(self, index: KGIndex, frontier: list[Path]) -> list[tuple[Path, int, int]]:
        """(path, triple row, next entity) for every relation leaving a frontier path's last entity (Eqs. 9-11)."""
        out = []
        for path in frontier:
            last = path.entities[-1]
            for row in triples_of(index, last):
                h, _, t = (int(x) for x in index.triples[row])
                nxt = t if h == last else h
                if nxt not in path.entities:
                    out.append((path, int(row), nxt))
        return out

    def select(self, question: str, index: KGIndex, pool: list[tuple[Path, int, int, float]], excessive: bool) -> list:
        """§3.3.2 (ii)/(iv): the LLM's choice of at most ``select_max`` when the step's candidates are
        ``excessive`` (and any passed the screen), else the ``max_width`` best. ``pool`` is sorted by path
        score, best first."""
        s = self.settings
        if excessive and pool:
            texts = [triple_text(index, row) for _, row, _, _ in pool]
            reply = self.llm.complete(prompts.select_relations(question, texts, s.select_max), max_new_tokens=16)
            order = read_order(parse_json(reply, [], counter=self.llm.usage, expect=(list, tuple, int)), len(pool))
            if order:
                return [pool[i] for i in order[: s.select_max]]
            self.llm.usage.count("select_fallback")
        return pool[: s.max_width]

    def expand(self, question: Question, index: KGIndex, frontier: list[Path], rng: np.random.Generator) -> list:
        """One layer: the chosen extensions of ``frontier``, best path score first (may be empty)."""
        cands = self.candidates(index, frontier)
        if not cands:
            self.layers.append({"candidates": 0})
            return []
        scored = self.scorer.score(question.question, [triple_text(index, row) for _, row, _ in cands], rng)
        kept = [cands[p] for p in scored.positions]
        keep = self.denoiser.screen([relation_label(index, row) for _, row, _ in kept], scored.scores)
        pool = [(*c, float(v)) for c, v, k in zip(kept, scored.scores, keep, strict=True) if k]
        pool.sort(key=lambda c: -path_score([c[0].score, c[3]]))  # Eq. 12; stable: ties keep the scorer's order
        excessive = len(cands) > self.settings.select_trigger
        chosen = self.select(question.question, index, pool, excessive)
        necessary = self.denoiser.necessary(question.question, [triple_text(index, row) for _, row, _, _ in chosen])
        paths = [path.extend(row, nxt, v) for (path, row, nxt, v), ok in zip(chosen, necessary, strict=True) if ok]
        self.layers.append(
            {
                "candidates": len(cands),
                "scored": len(kept),
                "screened": len(pool),
                "llm_selection": excessive and bool(pool),
                "chosen": len(chosen),
                "necessary": len(paths),
            }
        )
        return sorted(paths, key=lambda p: -p.score)

    def sufficient(self, question: str, index: KGIndex, paths: list[Path]) -> bool:
        """Eq. 13 over the triples of the layer's paths."""
        rows = list(dict.fromkeys(row for p in paths for row in p.triples))
        reply = self.llm.complete(
            prompts.sufficient(question, [triple_text(index, r) for r in rows]), max_new_tokens=3, stop=["\n"]
        )
        return parse_choice(reply, ("yes", "no"), "no", counter=self.llm.usage) == "yes"

    def run(self, question: Question, index: KGIndex, rng: np.random.Generator) -> TrackResult:
        s = self.settings
        self.layers: list[dict] = []
        e0 = self.central_entity(question, index)
        layers: list[list[Path]] = []
        checks = 0
        frontier = [Path((e0,), (), 1.0)] if e0 is not None else []
        for depth in range(1, s.max_depth + 1):
            frontier = self.expand(question, index, frontier, rng) if frontier else []
            if not frontier:
                break
            layers.append(frontier)
            if depth < s.max_depth:
                checks += 1
                if self.sufficient(question.question, index, frontier):
                    break
        best = layers[-1][: s.answer_paths] if layers else []
        if not best:
            self.llm.usage.count("no_path")
        facts = [triple_text(index, r) for r in dict.fromkeys(row for p in best for row in p.triples)]
        answer = first_line(
            self.llm.complete(prompts.answer_from(question.question, facts), max_new_tokens=24, stop=["\n"])
        )
        if not answer:
            self.llm.usage.count("answer_fallback")
            end = best[0].entities[-1] if best else e0
            answer = index.entities[end] if end is not None else "unknown"
        result = TrackResult("chain", answer)
        for p in best:
            for row in p.triples:
                result.use(row, p.score)
        result.trace = {
            "central": e0,
            "central_link": self.central,
            "layers": layers,
            "triples": self.layers,
            "checks": checks,
            "paths": best,
        }
        return result
