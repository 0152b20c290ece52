"""Train a retriever, test its best checkpoint and compare it with the baselines.

python train.py experiment=demo                          # GFM-RAG+ (small) on the embedded MuSiQue set, CPU
python train.py experiment=gfm_rag_plus trainer=gpu      # paper-size GFM-RAG+
python train.py experiment=gfm_rag_plus ckpt_path=checkpoints/<run>/last.ckpt   # resume a killed run
"""

import hydra
from omegaconf import DictConfig

from glmrag.training import run_train


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> None:
    run_train(cfg)


if __name__ == "__main__":
    main()
