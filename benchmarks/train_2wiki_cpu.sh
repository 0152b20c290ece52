#!/usr/bin/env bash
# Train experiment=cpu_2wiki (PPR fused with dense retrieval, plus a learned GNN correction) on the 2Wiki training
# slice on this CPU, then evaluate the best checkpoint beside its untrained self (the same model, lr 0: the
# training-free fusion it starts from) and every training-free baseline (dense, PPR, BM25, HippoRAG, HippoRAG 2)
# on every registry dataset, with paired tests against the trained model. Writes <out>/summary.md: the CPU time
# of training, every table, and per dataset the trained model against the strongest training-free baseline.
# Needs the 2Wiki files (docs/datasets.md: GLMRAG_DATA_DIR or ../shared/data). About 15 CPU minutes with the
# indexes built; building them first adds about 20 (benchmarks/RESULTS.md, "A trained retriever that beats
# its baselines").
#   bash benchmarks/train_2wiki_cpu.sh [out folder] [extra train.py overrides...]
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=$(date +%Y-%m-%d_%H-%M-%S)
out=${1:-outputs/bench/train_2wiki_cpu/$stamp}   # committed: benchmarks/results/train_2wiki_cpu
if [ -n "$(ls -A "$out" 2>/dev/null)" ]; then  # a run writes into a folder of its own and replaces nothing
  echo "$out already holds a run: pass a new folder (the committed results stay as they are)" >&2; exit 2
fi
shift || true
mkdir -p "$out"
TIMEFORMAT='%U %S %R'
ckpts=checkpoints/bench_2wiki_cpu/$stamp

# 1. Train (best epoch by val/recall@2 on the slice's validation split); its own test-split evaluation is below.
{ time python train.py experiment=cpu_2wiki evaluate=false study=cpu_2wiki output_dir="$out/train" \
    checkpoint_dir=$ckpts/trained "$@" >"$out/train.log" 2>&1; } 2>"$out/train_time.txt"
# 2. The untrained model: one epoch at lr 0 (no weight changes), so its checkpoint is the prior it starts from.
{ time python train.py experiment=cpu_2wiki evaluate=false test=false study=cpu_2wiki model_name=ppr_gnn_cpu_untrained \
    model.optimizer.lr=0 trainer.max_epochs=1 output_dir="$out/untrained" checkpoint_dir=$ckpts/untrained "$@" \
    >"$out/untrained.log" 2>&1; } 2>"$out/untrained_time.txt"
trained=$(ls $ckpts/trained/epoch*.ckpt | head -1)
untrained=$ckpts/untrained/last.ckpt

# 3. Every registry dataset with questions to answer: trained vs untrained vs the training-free baselines, paired
# tests against the trained model (Holm-corrected). 2wiki_train: its held-out test split (data.split=null picks it).
baselines=(dense ppr bm25 hipporag hipporag2)
for data in 2wiki_test 2wiki_dev 2wiki_train musique100; do
  { time python eval.py data=$data "retriever=[checkpoint,$(IFS=,; echo "${baselines[*]}")]" ckpt_path="$trained" \
      +retriever.untrained._target_=glmrag.retrievers.checkpoint.CheckpointRetriever \
      +retriever.untrained.ckpt_path="$untrained" reference=checkpoint study=cpu_2wiki \
      output_dir="$out/eval_$data" >"$out/eval_$data.log" 2>&1; } 2>"$out/eval_${data}_time.txt"
done

read -r user sys wall <"$out/train_time.txt"
{
  echo "# experiment=cpu_2wiki: trained vs untrained vs the training-free baselines"
  echo
  echo "Command: \`bash benchmarks/train_2wiki_cpu.sh $out $*\` ($(date -u +%Y-%m-%d), $(nproc) cores)."
  echo "Training job (loading, validation of the untrained model, training, test): $(python -c "print(f'{($user + $sys) / 60:.1f} CPU min ({$wall / 60:.1f} min wall)')")."
  echo "The untrained twin: $(awk '{printf "%.1f CPU min", ($1 + $2) / 60}' "$out/untrained_time.txt"); the four evaluations: $(cat "$out"/eval_*_time.txt | awk '{u += $1 + $2; w += $3} END {printf "%.1f CPU min (%.1f min wall)", u / 60, w / 60}')."
  echo "Best checkpoint: \`$trained\`; \`checkpoint\` is the trained model, \`untrained\` the same model before training."
  grep -h "before training\|no better than" "$out/train.log" | sed 's/^\[[^]]*\]\[[^]]*\]\[[A-Z]*\] - //' || true
  for data in 2wiki_test 2wiki_dev 2wiki_train musique100; do
    echo
    echo "## $data"
    echo
    sed -n '/^| System | Recall@2/,/^$/p' "$out/eval_$data/results.md"
    grep -h "questions with gold passages" "$out/eval_$data/results.md" | head -1 || true
    python - "$out/eval_$data/metrics.json" "${baselines[@]}" <<'EOF'
import json, sys
metrics = json.load(open(sys.argv[1]))
overall, trained = metrics["overall"], metrics["reference"]
tests = {(t["system"], t["metric"]): t for t in metrics["significance"]}
best = max(sys.argv[2:], key=lambda s: overall[s]["recall@2"]["mean"])
parts = []
for metric in ("recall@2", "recall@5"):
    test = tests[(best, metric)]  # baseline - trained, paired over the same questions
    parts.append(f"{metric} {100 * overall[trained][metric]['mean']:.1f} vs {100 * overall[best][metric]['mean']:.1f} "
                 f"(diff {-100 * test['diff']['mean']:+.1f}, Holm p {test['p_holm']:.3f})")
print(f"\nTrained against the strongest training-free baseline by Recall@2, {best}: " + "; ".join(parts) + ".")
EOF
  done
} >"$out/summary.md"
cat "$out/summary.md"
