"""retriever=hipporag2 beside HippoRAG 2's own retrieval code on the embedded MuSiQue set (issue 51).

The reference is HippoRAG 2's released code, OSU-NLP-Group/HippoRAG branch ``main`` at commit c617143
(``src/hipporag/HippoRAG.py``: ``index`` builds the graph, ``retrieve`` runs fact retrieval, the recognition
filter ``rerank_facts``, dense passage retrieval and ``graph_search_with_fact_entities`` / ``run_ppr``), run
from a scratch folder outside this repository by an adapter script, ``/work/scratch/hipporag2/run_reference.py``.
Their files are not edited; the adapter, at run time, only

- hands their ``HippoRAG.index`` glmrag's OpenIE (the released GPT-3.5 file as glmrag's importer reads it:
  title and text joined by a newline as each chunk's content, triples of three non-blank strings), written
  here as ``openie_results_ner_glmrag.json`` in HippoRAG 2's own layout;
- replaces ``text_processing`` (HippoRAG 2's ``[^A-Za-z0-9 ]`` -> space) with a lookup of glmrag's normalised
  phrase (``phrases.json``, :func:`glmrag.index.normalize.normalize_phrase` of every triple part), so that both
  build their nodes from the same strings;
- gives their ``HippoRAG`` an embedding model that returns glmrag's vectors (``embeddings.npy`` rows of
  ``texts.json``): the index's entity embeddings, the retriever's fact and passage embeddings and its question
  embeddings, all MiniLM (all-MiniLM-L6-v2); a text glmrag never embedded is an error there, so both embed the
  same strings (the few phrases and facts that only HippoRAG 2 keeps are embedded here by the same model);
  the query instructions of NV-Embed-v2 are ignored (MiniLM has none);
- stubs the imports of backends it never calls (litellm, gritlm, vllm, an extraction LLM for OpenIE that is
  never asked, since the OpenIE file covers every chunk) and runs on the CPU;
- without the filter (``--filter`` off): replaces ``rerank_filter`` by one that keeps the ``linking_top_k``
  candidate facts as they are, the paper's "w/o filter" ablation and glmrag's default; with ``--filter``:
  keeps their ``DSPyFilter`` and gives it an LLM stub whose reply, for each question, lists the facts SmolLM2
  listed for glmrag's recognition filter in an evaluation run (``filter_replies.json``, read from that run's
  traces), so their parse, their difflib match to the candidates and the graph search after it run on the same
  decisions (glmrag replays the same replies through its own parser and matcher).

Its settings are ``BaseConfig``'s defaults (linking_top_k 5, passage_node_weight 0.05, damping 0.5, synonym
threshold 0.8, ``synonymy_edge_topk`` 2047, undirected graph), glmrag's ``configs/retriever/hipporag2.yaml``.
It writes ``{question_id: {"top": [[corpus_index, score], ...], "facts": [[h, r, t], ...],
"seeds": [[phrase, weight], ...], "phrase_scores": [[phrase, score], ...]}}`` (top 10 passages, the facts that
seeded the graph search, the non-zero phrase seeds, every phrase of those facts with its score before the
``linking_top_k`` cut, in the order the cut kept them) in the question order of ``musique_train.json``, and
``rankings_graph.json``, every undirected pair of its graph with its summed weight.

Steps (the scratch run's exact commands, and the setup of its virtualenv, are in
``/work/scratch/hipporag2/README.md``; glmrag's side with ``GLMRAG_CACHE_DIR`` set as for any run)::

    # without the filter
    python benchmarks/hipporag2_side_by_side.py export --out /work/scratch/hipporag2/inputs
    cd /work/scratch/hipporag2 && PYTHONHASHSEED=0 venv/bin/python run_reference.py --inputs inputs \
        --out out/rankings.json          # also with PYTHONHASHSEED=1, 2, 3 into out_seed1..3
    python benchmarks/hipporag2_side_by_side.py compare --reference /work/scratch/hipporag2/out/rankings.json \
        --variants /work/scratch/hipporag2/out_seed{1,2,3}/rankings.json \
        --out benchmarks/results/hipporag2_side_by_side.json
    # with the recognition filter: SmolLM2's decisions of an evaluation run, replayed on both sides
    python eval.py data=musique100 'retriever=[hipporag2,hipporag2_filter]' \
        output_dir=benchmarks/results/eval_musique100_hipporag2_filter
    python benchmarks/hipporag2_side_by_side.py export --out /work/scratch/hipporag2/inputs_filter \
        --filter-from benchmarks/results/eval_musique100_hipporag2_filter/per_question.jsonl
    cd /work/scratch/hipporag2 && PYTHONHASHSEED=0 venv/bin/python run_reference.py --inputs inputs_filter \
        --out out_filter/rankings.json --filter
    python benchmarks/hipporag2_side_by_side.py compare --filter --inputs /work/scratch/hipporag2/inputs_filter \
        --reference /work/scratch/hipporag2/out_filter/rankings.json \
        --out benchmarks/results/hipporag2_side_by_side_filter.json

``compare`` prints the overlap of the top-5 passages, Recall@2 / @5 of both (gold: MuSiQue's supporting
paragraphs), the pairs and weights of both graphs, how the reruns (``--variants``) agree with the reference and,
for each question whose top-5 differs, both lists, both sets of facts and of phrase seeds, and whether
HippoRAG 2's own phrase scores tie at the ``linking_top_k`` cut (a tie glmrag breaks by id, HippoRAG 2 by the
iteration order of a Python set, which changes with ``PYTHONHASHSEED``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import glmrag
from glmrag.index.embed import passage_text
from glmrag.index.extractors.openie_import import OpenIEImportExtractor
from glmrag.index.normalize import normalize_phrase
from glmrag.io import cache_root
from glmrag.llm.base import LLM, Generation
from glmrag.retrievers.hipporag2 import HippoRAG2Retriever
from glmrag.retrievers.hipporag2_filter import facts_json

DATASET = "musique100"


def recall(ranked: list[str], gold: set[str], k: int) -> float:
    return len(set(ranked[:k]) & gold) / len(gold)


class ReplayLLM(LLM):
    """Replies to the recognition filter of question ``q`` with ``{"fact": replies[q]}`` (the usage tag's question)."""

    name = "replay"

    def __init__(self, replies: dict[str, list[list[str]]]) -> None:
        super().__init__()
        self.replies = replies

    def _generate(self, prompts, max_new_tokens, temperature, stop):
        _, question_id = self.usage.current_tag()
        return [Generation(facts_json(self.replies[question_id]), 0, 0) for _ in prompts]


def seeding_facts(trace: dict) -> list[list[str]]:
    """The facts that seeded the graph search: the linked ones, or those the filter kept (in its order)."""
    linked = trace.get("linked", [])
    kept = trace["filter"]["kept"] if "filter" in trace else range(len(linked))
    return [linked[i] for i in kept]


def make_retriever(llm: LLM | None = None) -> HippoRAG2Retriever:
    """``configs/retriever/hipporag2.yaml`` (with ``llm``: its recognition filter on), glmrag's caches."""
    return HippoRAG2Retriever(
        recognition_filter=llm is not None,
        llm=llm,
        cache_dir=cache_root() / "embeddings",
        fact_cache_dir=cache_root() / "phrase_embeddings",
    )


def filter_statistics(traces: dict[str, dict], index, questions) -> dict:
    """What the recognition filter decided over the questions of an evaluation run's traces, and how often the
    facts it kept and dropped are stated by one of the question's gold passages (a filter that judges relevance
    keeps those more often than it drops them)."""
    outcomes = [t["filter"]["outcome"] for t in traces.values()]
    kept = [t["filter"]["kept"] for t in traces.values()]
    listed = [(f, {tuple(c) for c in t["linked"]}) for t in traces.values() for f in t["filter"]["generated"] or []]
    row = {tuple(t): i for i, t in enumerate(index.triples.tolist())}
    relation = {r: i for i, r in enumerate(index.relations)}
    by_fact = index.passage_facts.tocsc()  # (P, T)
    gold = {q.id: {index.passage_position[p] for p in q.supporting} for q in questions}
    from_gold = {"kept": [0, 0], "dropped": [0, 0]}
    for qid, t in traces.items():
        for i, (h, r, tail) in enumerate(t["linked"]):
            fact = row[(index.entity_id[h], relation[r], index.entity_id[tail])]
            counts = from_gold["kept" if i in t["filter"]["kept"] else "dropped"]
            counts[0] += bool(set(by_fact[:, fact].indices) & gold[qid])
            counts[1] += 1
    return {
        "questions": len(outcomes),
        "outcomes": {k: outcomes.count(k) for k in ("kept all", "kept some", "kept none", "unreadable")},
        "kept_the_best_j_by_score": sum(0 < len(k) and set(k) == set(range(len(set(k)))) < set(range(5)) for k in kept),
        "mean_distinct_facts_kept": round(float(np.mean([len(set(k)) for k in kept])), 2),
        "facts_listed": len(listed),
        "facts_listed_verbatim": sum(tuple(f) in facts for f, facts in listed),
        "replies_listing_more_than_4": sum(len(t["filter"]["generated"] or []) > 4 for t in traces.values()),
        "linked_facts_from_a_gold_passage": {k: f"{g} of {n}" for k, (g, n) in from_gold.items()},
    }


def export(out: Path, filter_from: Path | None) -> None:
    """Write what the scratch adapter reads: the OpenIE file, the phrase map, the embeddings and questions."""
    out.mkdir(parents=True, exist_ok=True)
    data = glmrag.load_data(DATASET)
    index = glmrag.build_index(data)
    retriever = make_retriever()
    graph, facts = retriever.prepare(index)
    passages = retriever.passage_embeddings(index, data.corpus)  # (P, d) index order = corpus order
    questions = list(data.qa)
    encoder = retriever._encoder(index)
    queries = np.asarray(encoder.encode([q.question for q in questions], stage="questions", unit="question"))

    extractions = OpenIEImportExtractor(data.openie_path).extract(data.corpus)
    docs, phrases = [], {}
    for p, ex in zip(data.corpus, extractions, strict=True):
        docs.append(
            {
                "passage": passage_text(p),
                "extracted_entities": ex.entities,
                "extracted_triples": [list(t) for t in ex.triples],
            }
        )
        phrases |= {part: normalize_phrase(part) for t in ex.triples for part in t}
    (out / "openie_results_ner_glmrag.json").write_text(json.dumps({"docs": docs}, ensure_ascii=False))
    (out / "phrases.json").write_text(json.dumps(phrases, ensure_ascii=False))

    texts = [*index.entities, *graph.fact_texts, *(passage_text(p) for p in data.corpus)]
    vectors = [index.entity_embeddings, facts, passages]
    # HippoRAG 2 keeps triples with a part that normalises to "" (glmrag drops them): embed what only it asks for
    known = set(texts)
    extra_phrases = sorted(
        {n for t in (tuple(phrases[x] for x in t) for ex in extractions for t in ex.triples) for n in (t[0], t[2])}
        - known
    )
    extra_facts = sorted({str(tuple(phrases[x] for x in t)) for ex in extractions for t in ex.triples} - known)
    extra = extra_phrases + extra_facts
    if extra:
        texts += extra
        vectors.append(np.asarray(encoder.encode(extra, stage="extra texts", unit="text")))
    texts += [q.question for q in questions]
    vectors.append(queries)
    matrix = np.concatenate([np.asarray(v, dtype=np.float32) for v in vectors])
    np.save(out / "embeddings.npy", matrix)
    (out / "texts.json").write_text(json.dumps(texts, ensure_ascii=False))
    (out / "questions.json").write_text(
        json.dumps([{"id": q.id, "question": q.question} for q in questions], ensure_ascii=False)
    )
    summary = {"passages": len(docs), "texts": len(texts), "extra_phrases": extra_phrases, "extra_facts": extra_facts}
    if filter_from is not None:  # the decisions of an evaluation run of hipporag2_filter (its traces)
        rows = [json.loads(line) for line in filter_from.read_text().splitlines() if line.strip()]
        traces = {r["question_id"]: r["trace"] for r in rows if r["system"] == "hipporag2_filter"}
        replies = {q.id: traces[q.id]["filter"]["generated"] or [] for q in questions}
        (out / "filter_replies.json").write_text(json.dumps(replies, ensure_ascii=False))
        summary["filter"] = filter_statistics(traces, index, questions)
    (out / "export.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False))
    print(json.dumps(summary | {"extra_phrases": len(extra_phrases), "extra_facts": len(extra_facts)}, indent=1))


def graph_differences(index, graph, corpus, reference_graph: Path) -> dict:
    """The pairs and weights of glmrag's graph against the reference's dump (``[[a, b, weight], ...]``, endpoints
    as phrases or ``P<corpus row>``)."""
    theirs = {(a, b): w for a, b, w in json.loads(reference_graph.read_text())}
    n = index.num_entities

    def label(i: int) -> str:
        return index.entities[i] if i < n else f"P{corpus.position(index.passage_ids[i - n])}"

    ours: dict[tuple[str, str], float] = {}
    weights = sp.triu(graph.weights, k=1).tocoo()
    for i, j, w in zip(weights.row, weights.col, weights.data, strict=True):
        a, b = sorted((label(i), label(j)))
        ours[(a, b)] = float(w)
    shared = set(ours) & set(theirs)
    return {
        "pairs_glmrag": len(ours),
        "pairs_hipporag2": len(theirs),
        "only_glmrag": sorted([*k, ours[k]] for k in set(ours) - set(theirs)),
        "only_hipporag2": sorted([*k, theirs[k]] for k in set(theirs) - set(ours)),
        "max_relative_weight_difference": max(abs(ours[k] - theirs[k]) / theirs[k] for k in shared),
    }


def tie_at_cut(ours: list, phrase_scores: list, k: int) -> bool:
    """Whether HippoRAG 2's own phrase scores (every phrase of the seeding facts, in the order its cut kept them)
    tie exactly at the ``linking_top_k`` cut and the phrases glmrag seeds instead are among the tied: a tie
    broken by id here and by set iteration order there."""
    if len(phrase_scores) <= k:
        return False
    cut = phrase_scores[k - 1][1]
    tied = {p for p, w in phrase_scores if w == cut}
    kept = {p for p, _ in phrase_scores[:k]}
    return phrase_scores[k][1] == cut and {p for p, _ in ours} - kept <= tied


def compare(reference_path: Path, variants: list[Path], out: Path | None, filter_: bool, inputs: Path | None) -> None:
    """Rank MuSiQue-100 with ``retriever=hipporag2`` and compare with the reference's rankings."""
    reference = json.loads(reference_path.read_text())
    others = {path.parent.name: json.loads(path.read_text()) for path in variants}
    data = glmrag.load_data(DATASET)
    index = glmrag.build_index(data)
    questions = list(data.qa)
    retriever = make_retriever()
    if filter_:  # the LLM's decisions of the evaluation run, replayed: both sides filter with the same replies
        retriever = make_retriever(ReplayLLM(json.loads((inputs / "filter_replies.json").read_text())))
    start = time.perf_counter()
    rankings = {r.question_id: r for r in retriever.retrieve(questions, index, data.corpus, top_k=10)}
    seconds = time.perf_counter() - start
    graph, _ = retriever.prepare(index)
    traces = retriever.traces()

    def top(run: dict, qid: str) -> list[str]:
        return [data.corpus.ids[i] for i, _ in run[qid]["top"]]

    rows, differing, gaps, other_seeds = [], [], {}, {}
    for q in questions:
        ours, theirs = rankings[q.id].passage_ids, top(reference, q.id)
        gold = set(q.supporting)
        row = {
            "question_id": q.id,
            "same_top5": ours[:5] == theirs[:5],
            "same_top5_set": set(ours[:5]) == set(theirs[:5]),
            "same_top10": ours[:10] == theirs[:10],
            "recall": {f"ours@{k}": recall(ours, gold, k) for k in (2, 5)}
            | {f"hipporag2@{k}": recall(theirs, gold, k) for k in (2, 5)},
        }
        rows.append(row)
        trace = traces.get(q.id, {})
        seeds = trace.get("seeds", [])
        if sorted(p for p, _ in seeds) != sorted(p for p, _ in reference[q.id]["seeds"]):
            other_seeds[q.id] = {
                "phrase_tie_at_cut": tie_at_cut(seeds, reference[q.id]["phrase_scores"], retriever.linking_top_k)
            }
        if row["same_top10"]:
            mine, other = np.array(rankings[q.id].passage_scores), np.array([v for _, v in reference[q.id]["top"]])
            gaps[q.id] = float(np.max(np.abs(mine - other) / other))
        if not row["same_top5"]:
            differing.append(
                row
                | {
                    "phrase_tie_at_cut": tie_at_cut(seeds, reference[q.id]["phrase_scores"], retriever.linking_top_k),
                    "same_top5_in_hipporag2_runs": [
                        name for name, run in others.items() if top(run, q.id)[:5] == ours[:5]
                    ],
                    "ours_top5": ours[:5],
                    "hipporag2_top5": theirs[:5],
                    "ours_facts": seeding_facts(trace),
                    "hipporag2_facts": reference[q.id]["facts"],
                    "ours_seeds": seeds,
                    "hipporag2_seeds": reference[q.id]["seeds"],
                }
            )
    n = len(rows)
    summary = {
        "questions": n,
        "filter": "replayed SmolLM2 decisions" if filter_ else "none (linking_top_k facts kept)",
        "same_top5_in_order": sum(r["same_top5"] for r in rows),
        "same_top5_as_set": sum(r["same_top5_set"] for r in rows),
        "same_top10_in_order": sum(r["same_top10"] for r in rows),
        "same_seeding_facts_in_order": sum(seeding_facts(traces[q.id]) == reference[q.id]["facts"] for q in questions),
        "same_recall@2_and_@5": sum(
            r["recall"]["ours@2"] == r["recall"]["hipporag2@2"] and r["recall"]["ours@5"] == r["recall"]["hipporag2@5"]
            for r in rows
        ),
        "recall": {key: round(100 * float(np.mean([r["recall"][key] for r in rows])), 2) for key in rows[0]["recall"]},
        "questions_with_other_phrase_seeds": other_seeds,
        "score_gap_same_top10": {
            "median_relative": float(np.median(list(gaps.values()))),
            "over_1e-3": {qid: round(gap, 4) for qid, gap in gaps.items() if gap > 1e-3},
        },
        "hipporag2_runs_against_the_reference": {
            name: sum(top(run, q.id)[:5] == top(reference, q.id)[:5] for q in questions) for name, run in others.items()
        },
        "fallbacks_to_dense": retriever.fallbacks,
        "retrieve_seconds": round(seconds, 1),
    }
    reference_graph = reference_path.with_name(reference_path.stem + "_graph.json")
    if reference_graph.is_file():
        summary["graph"] = graph_differences(index, graph, data.corpus, reference_graph)
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    for row in differing:
        print(json.dumps(row, ensure_ascii=False))
    if out:
        if filter_:
            summary["recognition_filter"] = json.loads((inputs / "export.json").read_text())["filter"]
        out.write_text(json.dumps({"summary": summary, "differing": differing}, indent=1, ensure_ascii=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="write the reference run's inputs")
    ex.add_argument("--out", type=Path, required=True, help="folder for the adapter's inputs")
    ex.add_argument("--filter-from", type=Path, default=None, help="per_question.jsonl of a hipporag2_filter run")
    co = sub.add_parser("compare", help="compare with the reference's rankings.json")
    co.add_argument("--reference", type=Path, required=True, help="rankings.json of the HippoRAG 2 run")
    co.add_argument("--variants", type=Path, nargs="*", default=[], help="rankings of reruns (other hash seeds)")
    co.add_argument("--out", type=Path, default=None, help="write the comparison here as JSON")
    co.add_argument("--filter", action="store_true", help="the reference ran with the replayed filter replies")
    co.add_argument("--inputs", type=Path, default=None, help="the export folder (its filter_replies.json)")
    args = parser.parse_args()
    if args.command == "export":
        export(args.out, args.filter_from)
    else:
        compare(args.reference, args.variants, args.out, args.filter, args.inputs)


if __name__ == "__main__":
    main()
