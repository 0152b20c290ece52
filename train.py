"""Train a retriever, test its best checkpoint and compare it with the baselines (= ``glmrag-train``).

python train.py experiment=demo                          # GFM-RAG+ (small) on the embedded MuSiQue set, CPU
python train.py experiment=gfm_rag_plus trainer=gpu      # paper-size GFM-RAG+
python train.py experiment=gfm_rag_plus ckpt_path=checkpoints/<run>/last.ckpt   # resume a killed run
python train.py --help                                   # the common commands and every config name
"""

from glmrag.jobs.cli import train as main

if __name__ == "__main__":
    main()
