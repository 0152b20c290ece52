#!/usr/bin/env bash
# Untrained vs trained GNN retrievers against dense and PPR, on CPU, at demo size
# (hidden 64, 3 layers; the paper size is experiment=gfm_rag_plus / gfm_rag_star).
# Each run writes <out>/eval/{metrics.json,per_question.jsonl,results.md}.
#   bash benchmarks/train_gnn_cpu.sh            # about 25 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-outputs/bench/train_gnn_cpu/$(date +%Y-%m-%d_%H-%M-%S)}   # committed: benchmarks/results
if [ -n "$(ls -A "$out" 2>/dev/null)" ]; then  # a run writes into a folder of its own and replaces nothing
  echo "$out already holds a run: pass a new folder (the committed results stay as they are)" >&2; exit 2
fi
data=musique100
# GFM-RAG+ (demo size), 5 epochs
python train.py experiment=demo data=$data output_dir=$out/train_${data}_gfm_rag_plus checkpoint_dir=checkpoints/bench/${data}_plus
# GFM-RAG* at the same size: no text features
python train.py experiment=demo data=$data model_name=gfm_rag_star_demo model.gnn.use_node_features=false \
  output_dir=$out/train_${data}_gfm_rag_star checkpoint_dir=checkpoints/bench/${data}_star
# Untrained GFM-RAG+ (lr 0: no weight changes), evaluated the same way
python train.py experiment=demo data=$data model_name=untrained_plus_demo trainer.max_epochs=1 model.optimizer.lr=0 \
  output_dir=$out/train_${data}_untrained checkpoint_dir=checkpoints/bench/${data}_untrained
# 2Wiki train slice (spaCy graph: 30k entities, 108k triples): 2 epochs, about 2.5 s per step on 2 cores
python train.py experiment=demo data=2wiki_train trainer.max_epochs=2 \
  output_dir=$out/train_2wiki_train_gfm_rag_plus checkpoint_dir=checkpoints/bench/2wiki_train_plus
