"""LLM-written incidence descriptions (Read the Route §4.1), scripted LLM: labels, fallback, cache, new passages."""

import json
from pathlib import Path

import pytest

from glmrag.data.types import Corpus, Passage, Question
from glmrag.graph.hypergraph import Hypergraph, index_mentions, index_passages
from glmrag.index.synthetic import build_kg
from glmrag.retrievers.hyperaddress import HyperAddressRetriever
from glmrag.retrievers.hyperaddress.llm_descriptions import USAGE_TAG, LLMDescriber, description_prompt

CORPUS = Corpus(
    [
        Passage.make("Journal X", "The Journal X is published by the Psychological Society."),
        Passage.make("Psychological Society", "Its first president was Ann Lee, a psychologist."),
        Passage.make("Ann Lee", "Ann Lee was born in Boston in 1901."),
        Passage.make("Boston", "Boston is the capital of Massachusetts."),
    ]
)
MENTIONS = [
    ["journal x", "psychological society"],
    ["psychological society", "ann lee"],
    ["ann lee", "boston"],
    ["boston", "massachusetts"],
]
NAMES = list(dict.fromkeys(m for ms in MENTIONS for m in ms))
# Per passage title the scripted answer: "Massachusetts" gets nothing usable (a blank and a number), so it falls
# back to its sentence; keys differ in case from the index's normalised names; one answer is fenced with a comma.
ANSWERS = {
    "Journal X": '{"Journal X": ["journal of the Psychological Society"], "Psychological Society": ["publisher"]}',
    "Psychological Society": (
        '```json\n{"psychological society": ["society whose first president was Ann Lee"],'
        ' "Ann Lee": ["first president of the society", "psychologist", "first president of the society",'
        ' "a fourth one"],}\n```'
    ),
    "Ann Lee": '{"ann lee": "psychologist born in 1901", "boston": ["birthplace of Ann Lee"]}',
    "Boston": '{"boston": ["capital of Massachusetts"], "massachusetts": [" ", 3]}',
}


def title_of(prompt_text: str) -> str:
    """The passage a prompt asks about (the last paragraph block; the one-shot example comes first)."""
    return prompt_text.rsplit("Paragraph:\n```\n", 1)[1].split("\n", 1)[0]


def reply(prompt_text: str) -> str:
    return ANSWERS[title_of(prompt_text)]


@pytest.fixture
def index():
    kg = build_kg([], len(NAMES), [[NAMES.index(m) for m in ms] for ms in MENTIONS], passage_ids=CORPUS.ids)
    kg.entities[:] = NAMES
    return kg


def test_descriptions_label_the_hypergraph_and_fallbacks_are_counted(scripted_llm, index, hash_encoder, tmp_path):
    llm = scripted_llm(reply)
    sizes: list[int] = []
    generate = llm.generate
    llm.generate = lambda prompts, **kw: sizes.append(len(prompts)) or generate(prompts, **kw)
    describer = LLMDescriber(llm, max_descriptions=3, cache_dir=tmp_path, batch_size=3)
    retriever = HyperAddressRetriever(encoder=hash_encoder, describer=describer)
    graph = retriever.prepare(index, CORPUS).graph
    assert sizes == [3, 1]  # all passages described up front, batch_size per call
    labels = {
        (CORPUS[int(p)].title, graph.entities[e]): graph.labels[i]
        for i, (p, e) in enumerate(zip(graph.incidence_passage, graph.incidence_entity, strict=True))
    }
    assert labels == {
        ("Journal X", "journal x"): ("journal of the Psychological Society",),
        ("Journal X", "psychological society"): ("publisher",),
        ("Psychological Society", "psychological society"): ("society whose first president was Ann Lee",),
        ("Psychological Society", "ann lee"): ("first president of the society", "psychologist", "a fourth one"),
        ("Ann Lee", "ann lee"): ("psychologist born in 1901",),
        ("Ann Lee", "boston"): ("birthplace of Ann Lee",),
        ("Boston", "boston"): ("capital of Massachusetts",),
        ("Boston", "massachusetts"): ("Boston: Boston is the capital of Massachusetts.",),  # the sentence fallback
    }
    usage = llm.usage.get(USAGE_TAG)
    assert usage.calls == 4 and usage.events == {"json_repaired": 1, "description_fallback": 1}
    assert retriever.index_llm_cost()[USAGE_TAG].calls == 4
    # the walk ranks with these labels: a question that states a description restarts at its incidence
    question = Question("q", "birthplace of Ann Lee", ("Boston",), ())
    (ranking,) = retriever.retrieve([question], index, CORPUS, top_k=2)
    assert ranking.passage_ids[0] == CORPUS[2].id
    assert retriever.llm_cost() == {"q": retriever.llm_cost()["q"]} and retriever.llm_cost()["q"].calls == 0


def test_cache_hit_makes_no_calls(scripted_llm, index, tmp_path):
    first = Hypergraph.from_index(index, CORPUS, LLMDescriber(scripted_llm(reply), cache_dir=tmp_path))
    assert len(list(tmp_path.glob("descriptions-*.json"))) == 4
    llm = scripted_llm(reply)
    again = Hypergraph.from_index(index, CORPUS, LLMDescriber(llm, cache_dir=tmp_path))
    assert again.labels == first.labels and llm.prompts == [] and llm.usage.get(USAGE_TAG).calls == 0
    # fewer descriptions asked for is another question: asked again
    other = scripted_llm(reply)
    fewer = Hypergraph.from_index(index, CORPUS, LLMDescriber(other, max_descriptions=1, cache_dir=tmp_path))
    assert len(other.prompts) == 4 and all(len(d) == 1 for d in fewer.labels)


def test_adding_passages_describes_only_the_new_ones(scripted_llm, index, tmp_path):
    llm = scripted_llm(reply)
    describer = LLMDescriber(llm, cache_dir=tmp_path)
    graph = Hypergraph.from_index(index, CORPUS, describer, limit=2)
    assert [title_of(p) for p in llm.prompts] == ["Journal X", "Psychological Society"]
    graph.add_passages(index_passages(index, CORPUS, [2, 3]), index_mentions(index, [2, 3]), describer)
    assert [title_of(p) for p in llm.prompts[2:]] == ["Ann Lee", "Boston"]
    whole = Hypergraph.from_index(index, CORPUS, LLMDescriber(scripted_llm(reply)))
    assert graph.labels == whole.labels


def test_prompt_is_one_shot_and_lists_the_entities():
    chat = description_prompt(CORPUS[1], ["psychological society", "ann lee"], max_descriptions=2)
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user"]
    assert "one to 2 short descriptions" in chat[0]["content"]
    assert all(len(d) <= 2 for d in json.loads(chat[2]["content"]).values())
    assert chat[3]["content"].endswith('Entities: ["psychological society", "ann lee"]')
    with pytest.raises(ValueError, match="one to three"):
        LLMDescriber(None, max_descriptions=4)


def test_config_composes(scripted_llm, index, hash_encoder, tmp_path, monkeypatch):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    import glmrag.index.cache  # noqa: F401  (registers the ${glmrag_cache:...} resolver)

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=["retriever=[hyperaddress_llm]", "output_dir=unused"])
    node = cfg.retriever.hyperaddress_llm
    assert node.describer.llm._target_ == "glmrag.llm.local.LocalLLM"  # the one LLM config, passed in
    assert node.describer.llm.model == "offline:smollm2-135m-instruct" and node.steering is None
    llm = scripted_llm(reply)  # stands in for SmolLM2 here
    describer = instantiate(node.describer, llm=llm)
    assert describer.max_descriptions == 3 and describer.cache.cache_dir == tmp_path / "descriptions"
    retriever = instantiate(node, describer=describer, encoder=hash_encoder)
    assert retriever.name == "hyperaddress_llm"
    (ranking,) = retriever.retrieve([Question("q", "publisher", (), ())], index, CORPUS, top_k=3)
    assert len(ranking.passage_ids) == 3 and len(llm.prompts) == 4
