#!/usr/bin/env bash
# The GLM retriever at demo size (a random 2-layer T5, d_model 128, MiniLM tokenizer; 200 triplets) on
# CPU, against its GLM-RAG Table 15 baseline (the same subgraphs linearised, read by plain T5), the local
# GLM, an untrained GLM, dense and PPR, on the embedded MuSiQue set.
# Each run writes <out>/eval/{metrics.json,per_question.jsonl,results.md}.
#   bash benchmarks/train_glm_cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-outputs/bench/train_glm_cpu/$(date +%Y-%m-%d_%H-%M-%S)}   # committed: benchmarks/results
if [ -n "$(ls -A "$out" 2>/dev/null)" ]; then  # a run writes into a folder of its own and replaces nothing
  echo "$out already holds a run: pass a new folder (the committed results stay as they are)" >&2; exit 2
fi
data=musique100
run() {  # run <name> <overrides...>
  local name=$1; shift
  python train.py experiment=glm_demo data=$data output_dir=$out/train_${data}_$name \
    checkpoint_dir=checkpoints/bench/${data}_$name "$@"
}
run glm_demo
run glm_linear model_name=glm_linear_demo model.subgraph.layout=linear
run glm_local model_name=glm_local_demo model.glm.attention=local
run glm_untrained model_name=glm_untrained_demo trainer.max_epochs=1 model.lr.head=0 model.lr.backbone=0
# All trained retrievers side by side on the same test questions (GFM-RAG+ from benchmarks/train_gnn_cpu.sh).
best() { ls checkpoints/bench/${data}_$1/epoch*.ckpt | head -1; }
ckpt() { echo "{_target_: glmrag.retrievers.checkpoint.CheckpointRetriever, ckpt_path: $(best $1)}"; }
python eval.py data=$data data.split=test reference=glm_demo output_dir=$out/eval_${data}_glm_vs_gnn \
  "+retriever.glm_demo=$(ckpt glm_demo)" "+retriever.glm_linear_demo=$(ckpt glm_linear)" \
  "+retriever.glm_local_demo=$(ckpt glm_local)" "+retriever.gfm_rag_plus_demo=$(ckpt plus)"
