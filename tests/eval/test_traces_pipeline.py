"""The evaluation job writes what an LLM method decided: each ``per_question.jsonl`` row of DTKG carries its
trace, ``metrics.json`` the per-system summary, ``results.md`` the summary line (DTKG §3.2 routing visible).

The real ``configs/retriever/dtkg.yaml`` runs on the real musique_tiny index through :func:`run_eval`; only its
LLM is a scripted one that routes questions by a rule the test knows, so the expected tracks are known.
"""

import json

import hydra
import pytest
from omegaconf import OmegaConf

from glmrag.api import compose_config
from glmrag.data.registry import load_dataset
from glmrag.jobs import evaluate
from glmrag.retrievers.dtkg import DTKGRetriever

LIMIT = 6
pytestmark = pytest.mark.integration  # a whole evaluation job (index build, DTKG, dense): CI step 2


def routed_to_chain(question: str) -> bool:
    """The scripted classifier's rule: a question naming a country goes to the chain track."""
    return "country" in question


def reply(prompt: str) -> str:
    """The classifier answers by :func:`routed_to_chain`; every other step gets an empty reply (its fallbacks)."""
    if "Reply with one word: yes or no." in prompt and "step by step" in prompt:  # the classifier: yes = chained
        question = prompt.rsplit("Question:", 1)[1]
        return "yes" if routed_to_chain(question) else "no"
    return ""


@pytest.fixture
def outputs(tiny_musique, glmrag_cache, scripted_llm, monkeypatch, tmp_path):
    """The run's outputs folder, and the questions it was given (id -> text)."""
    built = evaluate.make_retrievers

    def make_retrievers(nodes):
        plain = {k: v for k, v in nodes.items() if k != "dtkg"}
        retrievers = built(OmegaConf.create(plain)) if plain else {}
        dtkg = hydra.utils.instantiate(nodes.dtkg, llm=scripted_llm(reply))  # the config's, with a scripted LLM
        return {"dtkg": dtkg} | retrievers

    monkeypatch.setattr(evaluate, "make_retrievers", make_retrievers)
    out = tmp_path / "out"
    overrides = ["data=musique100", f"data.name={tiny_musique}", f"data.limit={LIMIT}", "n_boot=50"]
    cfg = compose_config("eval", [*overrides, "retriever=[dtkg,dense]", f"output_dir={out}"])
    assert cfg.retriever.dtkg.settings.mode == "auto"
    assert hydra.utils.get_class(cfg.retriever.dtkg._target_) is DTKGRetriever
    evaluate.run_eval(cfg)
    questions = load_dataset(tiny_musique, limit=LIMIT).qa
    return out, {q.id: q.question for q in questions}


def test_every_dtkg_row_carries_its_trace_and_the_run_its_summary(outputs):
    out, questions = outputs
    rows = [json.loads(line) for line in (out / "per_question.jsonl").read_text().splitlines()]
    dtkg = [r for r in rows if r["system"] == "dtkg"]
    assert len(dtkg) == LIMIT and all("trace" not in r for r in rows if r["system"] == "dense")
    expected = {"chain": 0, "parallel": 0}
    for row in dtkg:
        trace = row["trace"]
        assert trace["why"].startswith("classifier:"), trace["why"]
        assert {"track", "fallbacks", "used"} <= set(trace)
        assert trace["track"] == ("chain" if routed_to_chain(questions[row["question_id"]]) else "parallel")
        expected[trace["track"]] += 1
    assert {r["question_id"] for r in dtkg} == set(questions) and min(expected.values()) > 0  # both tracks

    summary = json.loads((out / "metrics.json").read_text())["settings"]["method_summary"]
    assert set(summary) == {"dtkg"}
    assert summary["dtkg"]["tracks"] == {k: v for k, v in expected.items() if v}
    assert summary["dtkg"]["routing"]["classifier"] == LIMIT
    counts = ", ".join(f"{k} {v}" for k, v in summary["dtkg"]["tracks"].items())
    assert f"| dtkg | **tracks**: {counts};" in (out / "results.md").read_text()
