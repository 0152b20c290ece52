"""Profile one spaCy index build of the 2Wiki test corpus (6,119 passages) by stage, and save the index.

    python benchmarks/profile_index_build.py OUT_FOLDER > profile.txt

Prints the build time, the manifest's stage timings and counts, then the 40 costliest calls (cProfile,
cumulative). The saved index feeds ``bench_evaluate.py --index OUT_FOLDER``.
"""

import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

from glmrag.data.registry import load_dataset
from glmrag.index.build import IndexSettings, build_index
from glmrag.index.embed import Embedder
from glmrag.index.extractors.spacy_extractor import SpacyExtractor
from glmrag.index.store import save_index

ds = load_dataset("2wiki_test")
emb = Embedder()
emb.encode(["warm-up"])
t0 = time.perf_counter()
prof = cProfile.Profile()
prof.enable()
index = build_index(ds.corpus, ds.qa, SpacyExtractor(n_process=2), emb, IndexSettings())
prof.disable()
print("build_s", time.perf_counter() - t0)
print(json.dumps(index.manifest["timings_s"]), json.dumps(index.manifest["counts"]))
save_index(index, Path(sys.argv[1]))
pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
