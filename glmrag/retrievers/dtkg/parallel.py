"""The parallel fact-checking track (DTKG §3.3.1, Eqs. 4-8): draft, decompose, verify against the KG, answer.

:class:`ParallelTrack` drafts a one-sentence response, splits it into atomic facts, verifies each against
the top KG triples of its linked subject, rewrites the unsupported ones and answers from the result. The
triples used are every fact's top triples ``t*``, with their combined scores.
"""

from __future__ import annotations

import numpy as np

from glmrag.data.types import Question
from glmrag.index.kg import KGIndex
from glmrag.llm.parse import parse_choice, parse_json
from glmrag.retrievers.dtkg import prompts
from glmrag.retrievers.dtkg.evidence import TrackResult, relation_label, triple_text, triples_of
from glmrag.retrievers.dtkg.linking import clean_mention
from glmrag.retrievers.dtkg.track import Track, first_line, link_trace


class ParallelTrack(Track):
    """DTKG's parallel track; its steps (``s`` its :class:`~glmrag.retrievers.dtkg.settings.DTKGSettings`):

    1. A draft ``R`` split into atomic facts ``F = llm_dec(R)`` (Eq. 4), a JSON list of at most
       ``s.max_facts``; an unreadable list gives ``F = [R]`` (``decompose_fallback``).
    2. Each fact's subject (one batched call), linked by Eq. 5; an empty subject links the fact's text
       (``subject_fallback``); an unlinked one (``unlinked_mention``) leaves the fact unverified.
    3. The subject's triples, scored against the fact (Eqs. 6-7), screened (§3.4); the top ``s.verify_top``
       are the fact's ``t*``.
    4. Each fact verified against its ``t*`` (one batched yes/no call; unreadable: ``label_fallback``, kept
       as supported); unsupported facts are rewritten (Eq. 8; empty rewrite: ``rewrite_fallback``).
    5. The answer from the checked facts; an empty one falls back to ``R`` (``answer_fallback``).
    """

    def decompose(self, question: str, response: str) -> list[str]:
        """Eq. 4: the atomic facts of ``response`` (at most ``max_facts``; ``[response]`` on fallback)."""
        text = self.llm.complete(prompts.decompose(question, response), max_new_tokens=96)
        value = parse_json(text, [], counter=self.llm.usage, expect=list)
        facts = list(dict.fromkeys(f.strip() for f in value if isinstance(f, str) and f.strip()))
        if not facts:
            self.llm.usage.count("decompose_fallback")
            return [response]
        return facts[: self.settings.max_facts]

    def evidence(
        self, question: Question, index: KGIndex, facts: list[str], rng: np.random.Generator
    ) -> tuple[list[int | None], list[list[tuple[int, float]]]]:
        """Steps 2-3: each fact's linked entity and its top triples ``t*`` as (row, combined score), best first.

        Fills ``self.stages`` (links with their similarity, triples kept after each stage) for the trace.
        """
        gens = self.llm.generate([prompts.subject(f) for f in facts], max_new_tokens=12, stop=["\n"])
        linker = self.linker(index)
        entities: list[int | None] = []
        links = []
        for fact, g in zip(facts, gens, strict=True):
            mention = clean_mention(g.text)
            if not mention:
                self.llm.usage.count("subject_fallback")
            link = linker.link(mention or fact)
            if link is None:
                self.llm.usage.count("unlinked_mention")
            best = linker.best(mention or fact)
            links.append(link_trace(index, mention or fact, best, link is not None))
            entities.append(None if link is None else link.entity)
        rows = [triples_of(index, e) if e is not None else np.zeros(0, dtype=np.int64) for e in entities]
        texts = [[triple_text(index, int(r)) for r in rs] for rs in rows]
        scored = self.scorer.score_many(facts, texts, rng)
        groups = []
        for rs, s in zip(rows, scored, strict=True):
            kept = rs[s.positions]
            keep = self.denoiser.screen([relation_label(index, int(r)) for r in kept], s.scores)
            groups.append([(int(r), float(v)) for r, v in zip(kept[keep], s.scores[keep], strict=True)])
        screened = [len(g) for g in groups]
        groups = [g[: self.settings.verify_top] for g in self.denoiser.cross_redundant(groups)]
        top = [len(g) for g in groups]
        flat = [(i, row) for i, g in enumerate(groups) for row, _ in g]
        necessary = self.denoiser.necessary(question.question, [triple_text(index, row) for _, row in flat])
        dropped = {(i, row) for (i, row), ok in zip(flat, necessary, strict=True) if not ok}
        final = [[(row, s) for row, s in g if (i, row) not in dropped] for i, g in enumerate(groups)]
        self.stages = {
            "links": links,
            "triples": {
                "candidates": [len(rs) for rs in rows],
                "scored": [len(s.positions) for s in scored],
                "screened": screened,
                "top_k_after_cross_redundancy": top,
                "necessary": [len(g) for g in final],
            },
        }
        return entities, final

    def verify(self, index: KGIndex, facts: list[str], groups: list[list[tuple[int, float]]]) -> tuple[list, list]:
        """Step 4: (supported per fact: True / False / None when unverifiable, the final facts)."""
        evidence = {i: [triple_text(index, row) for row, _ in g] for i, g in enumerate(groups) if g}
        gens = self.llm.generate(
            [prompts.verify(facts[i], t) for i, t in evidence.items()], max_new_tokens=3, stop=["\n"]
        )
        supported: list[bool | None] = [None] * len(facts)
        for i, g in zip(evidence, gens, strict=True):
            supported[i] = parse_choice(g.text, ("yes", "no"), "yes", counter=self.llm.usage) == "yes"
        wrong = [i for i, ok in enumerate(supported) if ok is False]
        final = list(facts)
        gens = self.llm.generate(
            [prompts.rewrite(facts[i], evidence[i]) for i in wrong], max_new_tokens=40, stop=["\n"]
        )
        for i, g in zip(wrong, gens, strict=True):
            revised = first_line(g.text)
            if revised:
                final[i] = revised
            else:
                self.llm.usage.count("rewrite_fallback")
        return supported, final

    def run(self, question: Question, index: KGIndex, rng: np.random.Generator) -> TrackResult:
        draft = first_line(self.llm.complete(prompts.draft(question.question), max_new_tokens=32, stop=["\n"]))
        if not draft:
            self.llm.usage.count("draft_fallback")
            draft = question.question
        facts = self.decompose(question.question, draft)
        entities, groups = self.evidence(question, index, facts, rng)
        supported, final = self.verify(index, facts, groups)
        text = self.llm.complete(prompts.answer_from(question.question, final), max_new_tokens=24, stop=["\n"])
        answer = first_line(text)
        if not answer:
            self.llm.usage.count("answer_fallback")
            answer = draft
        result = TrackResult("parallel", answer)
        for group in groups:
            for row, score in group:
                result.use(row, score)
        result.trace = self.stages | {
            "draft": draft,
            "facts": facts,
            "entities": entities,
            "evidence": groups,
            "supported": supported,
            "final_facts": final,
        }
        return result
