#!/usr/bin/env bash
# Untrained vs trained GNN retrievers against dense and PPR, on CPU, at demo size
# (hidden 64, 3 layers; the paper size is experiment=gfm_rag_plus / gfm_rag_star).
# Each run writes <out>/eval/{metrics.json,per_question.jsonl,results.md}.
#   bash benchmarks/train_gnn_cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results
for data in musique100 2wiki_train; do
  # GFM-RAG+ (demo size), 5 epochs
  python train.py experiment=demo data=$data output_dir=$out/train_${data}_gfm_rag_plus checkpoint_dir=checkpoints/bench/${data}_plus
  # GFM-RAG* at the same size: no text features
  python train.py experiment=demo data=$data model_name=gfm_rag_star_demo model.use_node_features=false \
    output_dir=$out/train_${data}_gfm_rag_star checkpoint_dir=checkpoints/bench/${data}_star
  # Untrained GFM-RAG+ (no optimizer step: lr 0), evaluated the same way
  python train.py experiment=demo data=$data model_name=untrained_plus_demo trainer.max_epochs=1 model.optimizer.lr=0 \
    output_dir=$out/train_${data}_untrained checkpoint_dir=checkpoints/bench/${data}_untrained
done
