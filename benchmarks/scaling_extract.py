"""spaCy extractions of nested random subsets of the 2Wiki test corpus, timed and cached (issue 16 item 4).

The cache lets later stage benchmarks replay them, so the minutes of spaCy run once. For each size, the first
``n`` passages of one fixed permutation (seed 0) of the 6,119 passages, back in corpus order, are
extracted by :class:`~glmrag.index.extractors.spacy_extractor.SpacyExtractor` in one process
(``n_process=1``) unless ``--processes`` says otherwise. Wall seconds and CPU seconds of this process and
of its reaped children (``resource.getrusage``) are stored beside the extractions and the load average.

    python benchmarks/scaling_extract.py --sizes 500 1000 2000 6119 --cache /tmp/glmrag-scaling
"""

from __future__ import annotations

import argparse
import os
import pickle
import resource
import time
from pathlib import Path

import numpy as np

from glmrag.data.registry import load_dataset
from glmrag.data.types import Corpus
from glmrag.index.extractors.spacy_extractor import SpacyExtractor, load_nlp


def subset(corpus: Corpus, n: int) -> Corpus:
    """The first ``n`` passages of a fixed permutation (seed 0), in corpus order (nested across sizes)."""
    keep = np.sort(np.random.default_rng(0).permutation(len(corpus))[:n])
    return Corpus([corpus[int(i)] for i in keep])


def cpu_now() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of its reaped children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def cache_path(cache: Path, n: int, processes: int) -> Path:
    return cache / f"spacy_2wiki_test_{n}_p{processes}.pkl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 6119])
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/glmrag-scaling"))
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    corpus = load_dataset("2wiki_test").corpus
    load_nlp(SpacyExtractor().model)  # the model load is not part of the extraction
    for n in args.sizes:
        path = cache_path(args.cache, n, args.processes)
        if path.exists():
            continue
        part = subset(corpus, n)
        extractor = SpacyExtractor(n_process=args.processes)
        load = os.getloadavg()[0]
        wall, (me, kids) = time.perf_counter(), cpu_now()
        extractions = extractor.extract(part)
        me2, kids2 = cpu_now()
        record = {
            "passages": n,
            "processes": args.processes,
            "wall_s": time.perf_counter() - wall,
            "cpu_s": me2 - me,
            "children_cpu_s": kids2 - kids,
            "load_before": load,
            "load_after": os.getloadavg()[0],
            "extractor": extractor.describe(),
            "report": extractor.report,
            "passage_ids": part.ids,
            "extractions": extractions,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(record))
        tmp.replace(path)
        print(n, {k: v for k, v in record.items() if k.endswith("_s") or k.startswith("load")}, flush=True)


if __name__ == "__main__":
    main()
