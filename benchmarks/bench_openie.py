"""LLM OpenIE (glmrag/index/extractors/llm_openie.py) with SmolLM2-135M-Instruct on the CPU: speed and yield.

The first ``--passages`` passages of musique100 are extracted twice with the same cache folder:

- **cold**: an empty cache, so every passage costs one NER and one OpenIE generation
  (``--batch-size`` passages per ``generate`` call of each stage);
- **warm**: a fresh extractor over the filled cache, so no LLM call is made and only parsing runs.

Reported per run: passages per second, triples and entities per passage, the extractor's fallback
counts (JSON repaired or unreadable, malformed triples, answers cut off by the token budget) and the
LLM usage (calls, prompt and generated tokens). For scale, the triples per passage of the GPT-3.5
OpenIE file that ships with musique100 (HippoRAG's extraction) on the same passages are listed too.
The model load is not timed (``bench_llm_cpu.py`` measures it); the load average is recorded since the
two cores are shared.

Run (about 3 to 6 minutes on 2 cores): ``python benchmarks/bench_openie.py``. Writes ``--out`` (JSON,
temp file + rename) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

MODEL = "offline:smollm2-135m-instruct"
FALLBACKS = (
    "ner_json_repaired",
    "ner_json_fallback",
    "openie_json_repaired",
    "openie_json_fallback",
    "ner_no_list",
    "openie_no_list",
    "entities_bad",
    "entities_duplicate",
    "triples_duplicate",
    "triples_bad_length",
    "triples_not_string",
    "triples_empty_part",
    "ner_truncated",
    "openie_truncated",
)


def run(extractor, corpus) -> dict:
    """One extraction of ``corpus``: wall time, yield, report and the LLM usage it added."""
    llm = extractor.llm
    before = llm.usage.total()
    load = os.getloadavg()[0]
    start = time.perf_counter()
    out = extractor.extract(corpus)
    wall = time.perf_counter() - start
    usage = llm.usage.total()
    generated = usage.generated_tokens - before.generated_tokens
    n = len(corpus)
    return {
        "seconds": round(wall, 3),
        "passages_per_s": round(n / wall, 4),
        "triples_per_passage": round(sum(len(x.triples) for x in out) / n, 3),
        "entities_per_passage": round(sum(len(x.entities) for x in out) / n, 3),
        "llm_calls": usage.calls - before.calls,
        "prompt_tokens": usage.prompt_tokens - before.prompt_tokens,
        "generated_tokens": generated,
        "generated_tokens_per_s": round(generated / wall, 2),
        "fallbacks": {k: extractor.report.get(k, 0) for k in FALLBACKS},
        "report": dict(extractor.report),
        "loadavg_before": load,
        "example": {"passage": out[0].passage_id, "entities": out[0].entities[:8], "triples": out[0].triples[:5]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=8, help="first N musique100 passages")
    parser.add_argument("--batch-size", type=int, default=4, help="passages per generate call of each stage")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on 2 busy cores)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "openie_cpu.json"))
    args = parser.parse_args()

    import torch
    import transformers

    from glmrag.data.registry import load_dataset
    from glmrag.data.types import Corpus
    from glmrag.index.extractors.llm_openie import PROMPT_VERSION, LLMOpenIEExtractor
    from glmrag.index.extractors.openie_import import OpenIEImportExtractor
    from glmrag.io import atomic_write_text
    from glmrag.llm.local import LocalLLM

    torch.set_num_threads(args.threads)
    dataset = load_dataset("musique100")
    corpus = Corpus(list(dataset.corpus)[: args.passages])
    gpt = OpenIEImportExtractor(dataset.openie_path).extract(corpus)
    llm = LocalLLM(MODEL, batch_size=args.batch_size)
    with tempfile.TemporaryDirectory(prefix="bench_openie_") as cache:
        cold = run(LLMOpenIEExtractor(llm, cache_dir=cache, batch_size=args.batch_size), corpus)
        warm = run(LLMOpenIEExtractor(llm, cache_dir=cache, batch_size=args.batch_size), corpus)
    result = {
        "model": MODEL,
        "prompt_version": PROMPT_VERSION,
        "machine": {"cpus": os.cpu_count(), "torch_threads": args.threads},
        "transformers": transformers.__version__,
        "command": f"python benchmarks/bench_openie.py --passages {args.passages} --batch-size {args.batch_size}",
        "passages": len(corpus),
        "batch_size": args.batch_size,
        "gpt35_triples_per_passage": round(sum(len(x.triples) for x in gpt) / len(corpus), 3),
        "cold": cold,
        "warm": warm,
    }
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(f"{len(corpus)} musique100 passages, {MODEL}, batch {args.batch_size}, {args.threads} thread(s)\n")
    print("| run | seconds | passages/s | triples/passage | entities/passage | LLM calls | generated tok/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in (("cold", cold), ("warm", warm)):
        print(
            f"| {name} | {r['seconds']:.2f} | {r['passages_per_s']:.3f} | {r['triples_per_passage']:.2f} "
            f"| {r['entities_per_passage']:.2f} | {r['llm_calls']} | {r['generated_tokens_per_s']:.1f} |"
        )
    print(f"| GPT-3.5 OpenIE file (same passages) | | | {result['gpt35_triples_per_passage']:.2f} | | | |")
    print("\nfallbacks (cold):", json.dumps(cold["fallbacks"]))
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
