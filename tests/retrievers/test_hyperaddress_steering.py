"""Steering of the HyperAddress walk by a reader: a tiny random Llama reading with the offline MiniLM tokenizer."""

import re

import numpy as np
import pytest
import torch
from hyper_world import CORPUS, NAMES, world_index
from transformers import AutoTokenizer

from glmrag.data.types import Question
from glmrag.graph.hypergraph import Hypergraph
from glmrag.index.embed import DEFAULT_MODEL, resolve_model_path
from glmrag.io import read_cache_json
from glmrag.retrievers.hyperaddress import HyperAddressRetriever, HyperAddressSettings, addressing_heads
from glmrag.retrievers.hyperaddress.addressing_heads import make_probes, select_heads
from glmrag.retrievers.hyperaddress.reader_pointers import Reader, build_context, entity_pointer, pointer_scores
from glmrag.retrievers.hyperaddress.steering import Steering, SteeringSettings

QUESTION = Question("q", "Where was the first president of the publisher of Journal X born?", ("Boston",), ())


class FixedDescriber:
    """Each entity described by a fixed phrase (``ann lee`` as "first president"), else by its name."""

    name = "fixed"

    def describe(self, passage, entities):
        return [("first president",) if e == "ann lee" else (e,) for e in entities]


@pytest.fixture(scope="module")
def reader(tiny_llama):
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_MODEL))
    model = tiny_llama(tokenizer.vocab_size, max_position_embeddings=512)
    return Reader(model, tokenizer, "tiny-llama-test")


@pytest.fixture
def index():
    return world_index()


def blocks(graph, positions):
    return [
        (
            p,
            CORPUS[p],
            [(int(graph.incidence_entity[i]), NAMES[graph.incidence_entity[i]]) for i in graph.incidences_of(p)],
        )
        for p in positions
    ]


def test_context_maps_mentions_and_question_tokens(reader, index):
    graph = Hypergraph.from_index(index, CORPUS)
    context = build_context(reader, blocks(graph, [1, 2]), QUESTION.question)
    ids = context.input_ids[0]
    assert context.candidates == [NAMES.index(n) for n in ["psychological society", "ann lee", "boston"]]
    assert context.surface[NAMES.index("ann lee")] == "Ann Lee"
    for c, entity in enumerate(context.candidates):
        tokens = ids[context.mentions[:, c] > 0]
        text = reader.tokenizer.decode(tokens)
        assert all(w in text for w in NAMES[entity].split())
    ann = context.mentions[:, 1].nonzero().ravel().tolist()
    assert len(ann) == 6  # "Ann Lee" three times: the text of passage 1, the title and the text of passage 2
    question = reader.tokenizer.decode(ids[context.question_rows])
    assert question == QUESTION.question.lower()
    assert context.question_rows.max() == len(ids) - 2  # the last token is [SEP]


def test_pointer_scores_against_eager_attentions(reader, index):
    graph = Hypergraph.from_index(index, CORPUS)
    context = build_context(reader, blocks(graph, [0, 1, 2]), QUESTION.question)
    heads = [(0, 1), (1, 3)]
    scores = pointer_scores(reader, context, heads)  # (2, R, C)
    reader.model.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = reader.model(context.input_ids, output_attentions=True).attentions
    reader.model.set_attn_implementation("sdpa")
    for k, (layer, head) in enumerate(heads):
        rows = attentions[layer][0, head][context.question_rows]  # (R, S)
        assert torch.allclose(scores[k], rows @ context.mentions, atol=1e-5)
    assert entity_pointer(scores) == pytest.approx(scores.amax(dim=1).mean(dim=0).numpy(), abs=1e-7)


def test_head_selection_on_probes_is_cached(reader, index, tmp_path, monkeypatch):
    graph = Hypergraph.from_index(index, CORPUS)
    probes = make_probes(graph, lambda p: CORPUS[p], probes=6, context_passages=3, seed=0)
    assert probes
    for passages, question, target in probes:
        words = re.findall(r"\w+", question.lower())
        assert "it" in words and not any(w in words for w in NAMES[target].split())
        assert sum(target in [e for e, _ in ents] for _, _, ents in passages) == 1  # only one passage names it
    selection = select_heads(
        reader, graph, lambda p: CORPUS[p], num_heads=3, probes=6, context_passages=3, cache_dir=tmp_path
    )
    assert len(selection.heads) == 3 and len(set(selection.heads)) == 3 and 0 < selection.probes <= 6
    assert all(0 <= lay < 2 and 0 <= h < 4 for lay, h in selection.heads)
    assert selection.hit_rate == sorted(selection.hit_rate, reverse=True)
    (stored,) = tmp_path.glob("addressing-heads-*.json")
    assert read_cache_json(stored)["reader"] == "tiny-llama-test"
    assert not selection.from_cache
    original = addressing_heads.score_heads
    monkeypatch.setattr(addressing_heads, "score_heads", lambda *a: pytest.fail("heads should come from the cache"))
    again = select_heads(
        reader, graph, lambda p: CORPUS[p], num_heads=3, probes=6, context_passages=3, cache_dir=tmp_path
    )
    assert again == selection and again.from_cache
    # a damaged cache file is redone, never read
    stored.write_bytes(stored.read_bytes().replace(b"tiny-llama-test", b"tiny-llama-TEST"))
    monkeypatch.setattr(addressing_heads, "score_heads", original)
    redone = select_heads(
        reader, graph, lambda p: CORPUS[p], num_heads=3, probes=6, context_passages=3, cache_dir=tmp_path
    )
    assert redone == selection and not redone.from_cache


def test_one_round_restart_and_transitions(reader, index, hash_encoder):
    steering = Steering(
        reader, SteeringSettings(rounds=1, read_top=2, heads=[(0, 0), (1, 2)], pointer_weight=1.5, transition_gain=2.0)
    )
    retriever = HyperAddressRetriever(
        HyperAddressSettings(restart_top=3, tol=1e-12), encoder=hash_encoder, steering=steering
    )
    (ranking,) = retriever.retrieve([QUESTION], index, CORPUS, top_k=5)
    # the same round by hand: read the walk's top 2, point, add the restart term, reweight read incidences
    hyper = retriever.prepare(index, CORPUS)
    graph = hyper.graph
    r_p, r_e = retriever.restart_for(hyper, [QUESTION.question])
    walk_p, _ = retriever.pagerank(graph, graph.incidence_weights(), r_p[:, 0], r_e[:, 0])
    read = sorted(range(5), key=lambda p: (-walk_p[p], p))[:2]
    context = build_context(reader, blocks(graph, read), QUESTION.question)
    s = entity_pointer(pointer_scores(reader, context, [(0, 0), (1, 2)]))
    pointer = np.zeros(graph.num_entities)
    pointer[context.candidates] = s / s.sum()
    weights = graph.incidence_weights().copy()
    for i in range(graph.num_incidences):
        e = int(graph.incidence_entity[i])
        if graph.incidence_passage[i] in read and e in context.candidates:
            weights[i] *= 1 + 2.0 * s[context.candidates.index(e)] / s.max()
    x_p, x_e = retriever.pagerank(graph, weights, r_p[:, 0] / 2.5, (r_e[:, 0] + 1.5 * pointer) / 2.5)
    expected = sorted(range(5), key=lambda p: (-x_p[p], p))
    assert ranking.passage_ids == [CORPUS[p].id for p in expected]
    assert ranking.passage_scores == pytest.approx(x_p[expected].tolist(), abs=1e-10)
    assert steering.rewrites["q"] == [QUESTION.question]  # one round: no rewriting


def test_two_rounds_rewrite_a_described_span(reader, index, hash_encoder):
    steering = Steering(
        reader,
        SteeringSettings(rounds=2, read_top=3, heads=[(0, 0), (1, 2)], rewrite_candidates=10, rewrite_threshold=0.99),
    )
    retriever = HyperAddressRetriever(encoder=hash_encoder, describer=FixedDescriber(), steering=steering)
    walk_only = HyperAddressRetriever(encoder=hash_encoder, describer=FixedDescriber())
    question = Question("q2", "Where was the first president born", ("Boston",), ())
    (steered,) = retriever.retrieve([question], index, CORPUS, top_k=5)
    (walk,) = walk_only.retrieve([question], index, CORPUS, top_k=5)
    # "first president" is ann lee's description (cosine 1 with the hash encoder): rewritten to its name as read
    assert steering.rewrites["q2"] == [question.question, "Where was the Ann Lee born"]
    assert sorted(steered.passage_ids) == sorted(walk.passage_ids) and steered.passage_scores != walk.passage_scores
    zero = Steering(reader, SteeringSettings(rounds=0, heads=[(0, 0)]))
    (same,) = HyperAddressRetriever(encoder=hash_encoder, describer=FixedDescriber(), steering=zero).retrieve(
        [question], index, CORPUS, top_k=5
    )
    assert same.passage_scores == pytest.approx(walk.passage_scores)


def compose_steered(key, tmp_path, monkeypatch, overrides=()):
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    import glmrag.index.cache  # noqa: F401  (registers the ${glmrag_cache:...} resolver)

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=[f"retriever=[{key}]", "output_dir=unused", *overrides])
    node = cfg.retriever[key]
    node.steering.reader = None  # the tiny reader stands in for SmolLM2
    return node


def test_a_steering_settings_override_changes_the_rounds(reader, index, tmp_path, monkeypatch):
    from hydra.utils import instantiate

    key = "hyperaddress_1round"
    traces = {}
    for read_top in (None, 2):
        extra = [f"retriever.{key}.steering.settings.read_top={read_top}"] if read_top else []
        node = compose_steered(key, tmp_path, monkeypatch, [f"retriever.{key}.steering.settings.heads=[[0,0]]", *extra])
        retriever = instantiate(node)
        retriever.steering.reader = reader
        assert retriever.steering.settings.heads == ((0, 0),)  # a YAML list of pairs, held as a tuple
        retriever.retrieve([QUESTION], index, CORPUS, top_k=3)
        traces[read_top] = retriever.traces()[QUESTION.id]["rounds"]
    assert [len(r["read"]) for r in traces[None]] == [5] and [len(r["read"]) for r in traces[2]] == [2]


def test_old_flat_steering_keys_and_unknown_settings_fail_with_the_key(tmp_path, monkeypatch):
    from hydra.errors import ConfigCompositionException, InstantiationException
    from hydra.utils import instantiate

    key = "hyperaddress_2rounds"
    with pytest.raises(ConfigCompositionException, match=f"retriever.{key}.steering.rounds"):
        compose_steered(key, tmp_path, monkeypatch, [f"retriever.{key}.steering.rounds=1"])  # moved under settings
    node = compose_steered(key, tmp_path, monkeypatch, [f"+retriever.{key}.steering.settings.round=1"])
    with pytest.raises(InstantiationException, match="SteeringSettings(.|\\n)*'round'"):
        instantiate(node)
    node = compose_steered(key, tmp_path, monkeypatch, [f"retriever.{key}.steering.settings.rounds=1"])
    with pytest.raises(InstantiationException, match="rewrite=True with rounds=1"):  # the config rewrites
        instantiate(node)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rounds", -1, "'rounds': -1"),
        ("read_top", 0, "'read_top': 0"),
        ("transition_gain", -2.0, "'transition_gain': -2.0"),
        ("rewrite_threshold", 1.5, "'rewrite_threshold': 1.5"),
        ("pointer", "words", "settings.pointer='words' is unknown"),
        ("head_set", "best", "settings.head_set='best' is unknown"),
        ("target", "name", "settings.target='name' is unknown"),
        ("heads", [[0]], r"settings.heads=\[\[0\]\] must be \[\[layer, head\], ...\]"),
    ],
)
def test_steering_settings_validate(field, value, message):
    with pytest.raises(ValueError, match=message):
        SteeringSettings(**{field: value})
    with pytest.raises(TypeError, match="not a SteeringSettings"):
        Steering(None, {field: value})


@pytest.mark.parametrize(("key", "rounds"), [("hyperaddress_1round", 1), ("hyperaddress_2rounds", 2)])
def test_steered_configs_compose(key, rounds, reader, index, tmp_path, monkeypatch):
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    import glmrag.index.cache  # noqa: F401  (registers the ${glmrag_cache:...} resolver)

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=[f"retriever=[{key}]", "output_dir=unused"])
    node = cfg.retriever[key]
    assert node.steering.reader.llm._target_ == "glmrag.llm.local.LocalLLM"  # the one LLM config, passed in
    assert node.steering.reader.llm.model == "offline:smollm2-135m-instruct"
    node.steering.reader = None  # the tiny reader stands in for SmolLM2 here
    node.steering.settings.heads = [[0, 0], [1, 1]]
    retriever = instantiate(node)
    retriever.steering.reader = reader
    settings = retriever.steering.settings
    assert type(settings) is SteeringSettings and settings.rounds == rounds and settings.rewrite_threshold == 0.7
    assert retriever.steering.cache_dir == str(tmp_path / "heads")
    (ranking,) = retriever.retrieve([QUESTION], index, CORPUS, top_k=3)
    assert len(ranking.passage_ids) == 3
