"""benchmarks/stage_clock.py: each stage of an index build gets its own CPU seconds, none counted twice."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import stage_clock  # noqa: E402

COST = {"extract": 1.0, "encode": 10.0, "synonym_pairs": 100.0, "question_mentions": 1000.0, "link_mentions": 1e4}


class FakeCPU:
    """A CPU clock that advances only when a fake stage spends its cost."""

    def __init__(self) -> None:
        self.now = 0.0

    def spend(self, what: str) -> None:
        self.now += COST[what]


def fake_build(cpu: FakeCPU):
    """A module shaped like ``glmrag.index.build``: ``build_index`` calls the stages in the real order."""

    def link_mentions(mentions, entities, emb, encode):
        cpu.spend("link_mentions")
        return encode(mentions)  # the question mentions are embedded inside linking

    module = SimpleNamespace(
        synonym_pairs=lambda emb: cpu.spend("synonym_pairs"),
        question_mentions=lambda qa: cpu.spend("question_mentions") or ["a mention"],
        link_mentions=link_mentions,
    )

    def build_index(extractor, embedder):
        extractor.extract()
        emb = embedder.encode(["e1", "e2"])
        module.synonym_pairs(emb)
        mentions = module.question_mentions([])
        return module.link_mentions(mentions, ["e1", "e2"], emb, embedder.encode)

    module.build_index = build_index
    return module


class FakeEmbedder:
    def __init__(self, cpu: FakeCPU) -> None:
        self.cpu, self.calls = cpu, 0

    def encode(self, texts):
        self.calls += 1
        self.cpu.spend("encode")
        return texts


def test_instrumented_build_times_each_stage_once(monkeypatch):
    cpu = FakeCPU()
    monkeypatch.setattr(stage_clock, "cpu_seconds", lambda: cpu.now)
    build = fake_build(cpu)
    extractor = SimpleNamespace(extract=lambda: cpu.spend("extract"))
    embedder = FakeEmbedder(cpu)
    clock = stage_clock.StageClock()
    clock.instrument_build(build, extractor, embedder)
    clock.measure("build", build.build_index, extractor, embedder)
    assert clock.cpu == {
        "extract": 1.0,
        "embed_entities": 10.0,  # the first encode only
        "synonyms": 100.0,
        "link_questions": 1000.0 + 1e4 + 10.0,  # question spaCy + linking, the mentions' encode inside it
        "build": 1.0 + 10.0 + 100.0 + 1000.0 + 1e4 + 10.0,
    }
    assert embedder.calls == 2 and "encode" not in vars(embedder)  # back to the class's method
