"""A researcher's own files (``data=files``): every format read, and evaluated end to end through Hydra.

One tiny world (four passages, two questions) is written in each format's own schema; every format must
give the same passages and the same gold, and ``eval.py data=files`` must rank and score it.
"""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from glmrag.data import registry
from glmrag.data.files import FORMATS, load_files, register_files
from glmrag.data.registry import load_dataset
from glmrag.data.types import DataFormatError, Passage
from glmrag.jobs.evaluate import run_eval

ROOT = Path(__file__).resolve().parents[2]

PASSAGES = {
    "Lyon": ["Lyon is a city in France.", "It lies on the Rhone."],
    "France": ["France is a country in Europe.", "Its capital is Paris."],
    "Rhone": ["The Rhone is a river that rises in Switzerland."],
    "Oslo": ["Oslo is the capital of Norway."],
}
QUESTIONS = [  # (id, question, answer, supporting titles)
    ("q1", "Which continent is the country of Lyon in?", "Europe", ["Lyon", "France"]),
    ("q2", "Where does the river of Lyon rise?", "Switzerland", ["Lyon", "Rhone"]),
]


def text(title: str) -> str:
    return " ".join(PASSAGES[title])


def expected_gold() -> dict[str, set[str]]:
    return {qid: {Passage.make(t, text(t)).id for t in titles} for qid, _, _, titles in QUESTIONS}


def dump(path: Path, data, lines: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "\n".join(json.dumps(r) for r in data) if lines else json.dumps(data)
    path.write_text(body + "\n", encoding="utf-8")
    return path


def paragraphs(titles):
    return [{"title": t, "paragraph_text": text(t), "is_supporting": t in titles} for t in PASSAGES]


def write_format(fmt: str, folder: Path) -> dict:
    """The world in ``fmt``; returns the data config's paths. JSON Lines go under .json names on purpose."""
    corpus_list = [{"title": t, "text": text(t)} for t in PASSAGES]
    if fmt == "hipporag":  # the corpus in the older {title: [sentence, ...]} shape
        qs = [{"id": i, "question": q, "answer": a, "paragraphs": paragraphs(ts)} for i, q, a, ts in QUESTIONS]
        return {"questions": dump(folder / "mine.json", qs), "corpus": dump(folder / "mine_corpus.json", PASSAGES)}
    if fmt == "musique":
        qs = [
            {"id": f"2hop__{i}", "question": q, "answer": a, "answerable": True, "paragraphs": paragraphs(ts)}
            for i, q, a, ts in QUESTIONS
        ]
        return {"questions": dump(folder / "musique_dev.json", qs, lines=True)}
    if fmt in ("hotpotqa", "2wiki"):
        # HotpotQA keeps each later sentence's leading space; 2Wiki has none: both join to the same text
        lead = " " if fmt == "hotpotqa" else ""
        context = [[t, [s if j == 0 else lead + s for j, s in enumerate(PASSAGES[t])]] for t in PASSAGES]
        qs = [
            {"_id": i, "question": q, "answer": a, "context": context, "supporting_facts": [[t, 0] for t in ts]}
            for i, q, a, ts in QUESTIONS
        ]
        return {"questions": dump(folder / "dev.json", qs, lines=fmt == "2wiki")}
    if fmt == "linearrag":
        qs = [
            {"id": i, "question": q, "answer": a, "evidence": [[t, "related to", "x"] for t in ts]}
            for i, q, a, ts in QUESTIONS
        ]
        return {"questions": dump(folder / "questions.json", qs), "corpus": dump(folder / "corpus.json", corpus_list)}
    if fmt == "gfmrag":
        qs = [{"id": i, "question": q, "answer": a, "supporting_facts": ts} for i, q, a, ts in QUESTIONS]
        dump(folder / "gfm/raw/dataset_corpus.json", PASSAGES)
        dump(folder / "gfm/raw/train.json", qs[:1])
        dump(folder / "gfm/raw/test.json", qs[1:])
        return {"questions": folder / "gfm"}
    assert fmt == "plain"  # a folder of text files, one per passage
    for title in PASSAGES:
        (folder / "docs").mkdir(parents=True, exist_ok=True)
        (folder / "docs" / f"{title}.txt").write_text(text(title) + "\n", encoding="utf-8")
    qs = [{"id": i, "question": q, "answers": [a], "supporting_titles": ts} for i, q, a, ts in QUESTIONS]
    return {"questions": dump(folder / "questions.jsonl", qs, lines=True), "corpus": folder / "docs"}


def qid(fmt: str, i: str) -> str:
    return f"2hop__{i}" if fmt == "musique" else i


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_gives_the_same_passages_and_gold(fmt, tmp_path):
    ds = load_files(fmt, **write_format(fmt, tmp_path), name="mine")
    assert sorted(p.text for p in ds.corpus) == sorted(text(t) for t in PASSAGES)
    gold = {q.id: set(q.supporting) for q in ds.qa}
    assert gold == {qid(fmt, i): ids for i, ids in expected_gold().items()}


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """Datasets registered by a test are forgotten after it."""
    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))


@pytest.fixture
def eval_config(tmp_path, monkeypatch):
    """A factory of ``eval.yaml`` configs with these overrides, caching indexes under ``tmp_path``."""
    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "cache"))

    def make(overrides: list[str]):
        with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
            return compose(config_name="eval", overrides=[*overrides, f"results_dir={tmp_path / 'results'}"])

    return make


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_eval_job_on_own_files_of_every_format(fmt, tmp_path, eval_config):
    paths = write_format(fmt, tmp_path / "in")
    out = tmp_path / "out"
    overrides = ["data=files", f"data.format={fmt}", f"data.name=mine_{fmt}", f"output_dir={out}", "n_boot=50"]
    overrides += [f"data.{key}={value}" for key, value in paths.items()]
    result = run_eval(eval_config([*overrides, "retriever=[dense,ppr]"]))
    assert result.counts == {"questions": 2, "evaluated": 2, "excluded_no_gold": 0}
    # four passages, two gold each: any complete ranking finds both by rank 5
    assert result.overall["ppr"]["recall@5"].mean == pytest.approx(1.0)
    assert len((out / "per_question.jsonl").read_text().splitlines()) == 4
    assert registry.DATASETS[f"mine_{fmt}"].description.startswith(f"{fmt} files")


def test_questions_without_gold_are_ranked_and_the_run_says_so(tmp_path, eval_config):
    corpus = dump(tmp_path / "passages.json", [{"title": t, "text": text(t)} for t in PASSAGES], lines=True)
    qs = dump(tmp_path / "questions.json", [{"id": "u1", "question": "Where does the Rhone rise?"}], lines=True)
    out = tmp_path / "out"
    cfg = eval_config(["data=files", f"data.corpus={corpus}", f"data.questions={qs}", f"output_dir={out}"])
    result = run_eval(cfg)
    assert result.counts == {"questions": 1, "evaluated": 0, "excluded_no_gold": 1}
    row = json.loads((out / "per_question.jsonl").read_text().splitlines()[0])
    assert row["question_id"] == "u1" and len(row["top_passages"]) == 4
    assert "without gold" in (out / "results.md").read_text()


def test_own_split_of_a_gfmrag_folder_is_kept(tmp_path):
    paths = write_format("gfmrag", tmp_path)
    register_files("mine_split", "gfmrag", **paths)
    assert [q.id for q in load_dataset("mine_split", split="train").qa] == ["q1"]
    assert [q.id for q in load_dataset("mine_split", split="test").qa] == ["q2"]
    assert len(load_dataset("mine_split").qa) == 2


def test_a_builtin_name_cannot_be_taken_and_bad_paths_are_named(tmp_path):
    paths = write_format("plain", tmp_path)
    with pytest.raises(ValueError, match="built-in dataset"):
        register_files("musique100", "plain", **paths)
    with pytest.raises(ValueError, match="needs data.corpus"):
        load_files("hipporag", questions=paths["questions"])
    with pytest.raises(ValueError, match="unknown data format 'hotpot'"):
        load_files("hotpot", questions=paths["questions"])
    bad = dump(tmp_path / "q.json", [{"id": "x", "question": "Q?", "supporting_titles": ["Paris"]}], lines=True)
    with pytest.raises(DataFormatError, match=r"q.json: question 1 \(id 'x'\): has supporting title 'Paris'"):
        load_files("plain", questions=bad, corpus=paths["corpus"])


def test_an_unlabelled_hotpotqa_test_file_is_kept_without_gold(tmp_path):
    """The official fullwiki test file has neither ``answer`` nor ``supporting_facts``."""
    context = [[t, PASSAGES[t]] for t in PASSAGES]
    path = dump(tmp_path / "hotpot_test.json", [{"_id": "t1", "question": "Where is Lyon?", "context": context}])
    ds = load_files("hotpotqa", questions=path)
    assert [(q.id, q.answers, q.supporting) for q in ds.qa] == [("t1", (), ())]
    assert ds.report.counts == {"question_without_gold": 1}


def test_a_folder_of_documents_without_questions_is_indexed_and_searchable(tmp_path, monkeypatch):
    import glmrag

    monkeypatch.setenv("GLMRAG_CACHE_DIR", str(tmp_path / "cache"))
    docs = write_format("plain", tmp_path)["corpus"]
    data = glmrag.load_data("my_docs", format="plain", corpus=docs)
    assert len(data.corpus) == 4 and len(data.qa) == 0
    index = glmrag.build_index(data)
    (ranking,) = glmrag.retrieve("ppr", ["Which river rises in Switzerland?"], index, data, top_k=4)
    assert sorted(ranking.passage_ids) == sorted(data.corpus.ids)
    (ranking,) = glmrag.retrieve("dense", ["Which river rises in Switzerland?"], index, data, top_k=1)
    assert data.corpus[data.corpus.position(ranking.passage_ids[0])].title == "Rhone"
