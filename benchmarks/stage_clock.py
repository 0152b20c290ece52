"""Wall and CPU seconds per stage of :func:`glmrag.index.build.build_index` (issue 16 items 4 and 6).

``build_index`` records wall seconds per stage in its manifest; on a shared machine the figure to compare is
CPU seconds, so :class:`StageClock` wraps the functions a build calls for each stage (the extractor's
``extract``, the embedder's first ``encode`` for the entities, ``synonym_pairs``, ``question_mentions`` and
``link_mentions``) and adds their wall and CPU seconds (``resource.getrusage``: this process and its reaped
children, so spaCy worker processes count). It patches only names that ``build_index`` reads at call time,
so it works on older commits of the package too (``benchmarks/profile_index_build.py --plain`` runs it
against a ``git archive`` of the code before the embedding changes).
"""

from __future__ import annotations

import resource
import time


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its reaped children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class StageClock:
    """Wall and CPU seconds per named stage, summed over every timed call."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def timed(self, stage: str, fn):
        """``fn`` wrapped so that each call adds its seconds to ``stage``."""

        def run(*args, **kwargs):
            wall, cpu = time.perf_counter(), cpu_seconds()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[stage] = self.wall.get(stage, 0.0) + time.perf_counter() - wall
                self.cpu[stage] = self.cpu.get(stage, 0.0) + cpu_seconds() - cpu

        return run

    def measure(self, stage: str, fn, *args, **kwargs):
        """Call ``fn(*args, **kwargs)`` once, timed as ``stage``; its result."""
        return self.timed(stage, fn)(*args, **kwargs)

    def instrument_build(self, build_module, extractor, embedder) -> None:
        """Time a coming ``build_module.build_index(..., extractor, embedder, ...)`` by stage.

        The embedder's first ``encode`` call is the entity embedding (``build_index`` embeds the entities before
        anything else); its later calls embed question mentions inside ``link_mentions``, timed there.
        """
        for name, stage in (
            ("synonym_pairs", "synonyms"),
            ("question_mentions", "link_questions"),
            ("link_mentions", "link_questions"),
        ):
            setattr(build_module, name, self.timed(stage, getattr(build_module, name)))
        extractor.extract = self.timed("extract", extractor.extract)
        entities = self.timed("embed_entities", embedder.encode)

        def first_encode(texts):
            del embedder.encode  # back to the class's method for the mentions
            return entities(texts)

        embedder.encode = first_encode

    def rounded(self) -> dict[str, dict[str, float]]:
        return {
            "wall_s": {k: round(v, 3) for k, v in self.wall.items()},
            "cpu_s": {k: round(v, 3) for k, v in self.cpu.items()},
        }
