"""Evaluate retrievers on a dataset with the shared evaluator.

python eval.py                                   # dense vs PPR on the embedded MuSiQue set
python eval.py data=2wiki_test retriever=[ppr] data.limit=100 output_dir=outputs/2wiki
python eval.py study=mine                        # also filed under results/mine/ (read by python -m glmrag.report)
python eval.py retriever=[dense] qa=true data.limit=20   # also answer with the QA reader (configs/llm/local.yaml):
                                                         # EM/F1, the no-context and subgraph baselines, LLM cost
"""

import hydra
from omegaconf import DictConfig

from glmrag.pipeline import run_eval, store_eval_run


@hydra.main(version_base="1.3", config_path="configs", config_name="eval")
def main(cfg: DictConfig) -> None:
    store_eval_run(cfg, run_eval(cfg))


if __name__ == "__main__":
    main()
