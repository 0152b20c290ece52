"""Time or profile one spaCy index build of the 2Wiki test corpus (6,119 passages) by stage, and save the index.

    python benchmarks/profile_index_build.py OUT_FOLDER > profile.txt
    python benchmarks/profile_index_build.py OUT_FOLDER --plain --json build.json [--phrase-cache DIR]

Default: cProfile over the build; prints the build time, the manifest's stage timings and counts, then the
40 costliest calls (cumulative). cProfile inflates the times of Python-heavy stages, so ``--plain`` times the
build without it: wall and CPU seconds per stage (:class:`stage_clock.StageClock`), peak RSS, the load
average before and after, written to ``--json``. ``--plain`` uses only names that exist before the
embedding changes of issue 16 item 6 (commit a2fd491), so the same script times the old package
(``git archive 2e080ca | tar -x -C /tmp/before`` and ``PYTHONPATH=/tmp/before``); ``--phrase-cache`` (new
code only) gives the embedder that phrase cache folder, as the index config's ``embed_cache_dir`` does.
The MiniLM model is loaded before the clock starts. The saved index feeds ``bench_evaluate.py --index``.
"""

import argparse
import cProfile
import json
import os
import pstats
import time
from pathlib import Path

from scaling_extract import subset
from stage_clock import StageClock, cpu_seconds, peak_rss_mb

from glmrag.data.registry import load_dataset
from glmrag.index import build
from glmrag.index.embed import Embedder
from glmrag.index.extractors.spacy_extractor import SpacyExtractor
from glmrag.index.store import save_index
from glmrag.io import atomic_write_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder the built index is saved to")
    parser.add_argument("--plain", action="store_true", help="no cProfile: wall and CPU seconds per stage")
    parser.add_argument("--json", type=Path, help="--plain: write the timings here")
    parser.add_argument("--processes", type=int, default=2, help="spaCy processes (the config's choice on 2 cores)")
    parser.add_argument("--phrase-cache", type=Path, help="the embedder's phrase cache folder (new code only)")
    parser.add_argument("--passages", type=int, help="a nested random subset of this size (scaling_extract.subset)")
    parser.add_argument("--synonym-threshold", type=float, default=build.IndexSettings().synonym_threshold)
    args = parser.parse_args()

    ds = load_dataset("2wiki_test")
    corpus = subset(ds.corpus, args.passages) if args.passages else ds.corpus
    Embedder().encode(["warm-up"])  # loads the shared model outside the clock, without touching a phrase cache
    emb = Embedder(cache_dir=args.phrase_cache) if args.phrase_cache else Embedder()
    extractor = SpacyExtractor(n_process=args.processes)
    settings = build.IndexSettings(synonym_threshold=args.synonym_threshold)
    if not args.plain:
        t0 = time.perf_counter()
        prof = cProfile.Profile()
        prof.enable()
        index = build.build_index(corpus, ds.qa, extractor, emb, settings)
        prof.disable()
        print("build_s", time.perf_counter() - t0)
        print(json.dumps(index.manifest["timings_s"]), json.dumps(index.manifest["counts"]))
        save_index(index, args.out)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
        return
    clock = StageClock()
    clock.instrument_build(build, extractor, emb)
    load = os.getloadavg()
    index = clock.measure("build", build.build_index, corpus, ds.qa, extractor, emb, settings)
    clock.measure("save", save_index, index, args.out)
    record = {
        "package": build.__file__,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "passages": len(corpus),
        "spacy_processes": args.processes,
        "phrase_cache": str(args.phrase_cache) if args.phrase_cache else None,
        "synonym_threshold": args.synonym_threshold,
        **clock.rounded(),
        "other_build_cpu_s": round(
            clock.cpu["build"] - sum(v for k, v in clock.cpu.items() if k not in ("build", "save")), 3
        ),
        "process_cpu_s": round(cpu_seconds(), 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "manifest_timings_s": index.manifest["timings_s"],
        "counts": index.manifest["counts"],
        "load_average_before": load,
        "load_average_after": os.getloadavg(),
    }
    print(json.dumps(record, indent=2))
    if args.json:
        atomic_write_text(args.json, json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
