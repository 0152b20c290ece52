"""Gold-passage reachability by hop and triplet budget (GLM-RAG App. D.2, Fig. 17).

    python benchmarks/reachability.py data=musique100 --out benchmarks/results/reachability_musique100.md

Arguments after the options are Hydra overrides of ``configs/eval.yaml`` (which
dataset, which index settings); the index comes from the same cache as eval.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hydra import compose, initialize_config_dir

from glmrag.data.registry import load_dataset
from glmrag.graph.reachability import format_table, gold_reachability
from glmrag.index.cache import get_index
from glmrag.jobs import config_path  # noqa: F401  (registers the resolvers and schemas the configs use)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hops", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--triplets", type=int, nargs="+", default=[100, 200, 300, 400, 500, 600, 800])
    parser.add_argument("--out", type=Path, default=None)
    args, overrides = parser.parse_known_args()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=[*overrides, "output_dir=unused"])

    full = load_dataset(cfg.data.name, root=cfg.data.root)
    dataset = load_dataset(cfg.data.name, split=cfg.data.split, limit=cfg.data.limit, root=cfg.data.root)
    index = get_index(full, cfg.index)
    rows = gold_reachability(list(dataset.qa), index, hops=args.hops, triplets=args.triplets)
    table = "```\n" + format_table(rows) + "\n```"
    header = (
        f"# Gold-passage reachability on {dataset.name} ({len(dataset.qa)} questions, "
        f"{index.manifest['extractor']['name']} index)\n\n"
        f"Command: `python benchmarks/reachability.py {' '.join(overrides)} --hops {' '.join(map(str, args.hops))} "
        f"--triplets {' '.join(map(str, args.triplets))}`\n\n"
    )
    print(header + table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(header + table + "\n")


if __name__ == "__main__":
    main()
