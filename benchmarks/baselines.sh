#!/usr/bin/env bash
# Every training-free baseline beside dense retrieval on every registry dataset with questions (issue 33): one
# evaluation per dataset, paired tests against dense (Holm-corrected over the dataset's comparisons). Writes
# <out>/<dataset>/ (results.md, metrics.json) and <out>/summary.md with each dataset's table and its wall time.
# The 2Wiki sets need their files (docs/datasets.md: GLMRAG_DATA_DIR or ../shared/data). hipporag2's first call
# on a dataset embeds every fact (about 8 minutes for the 2Wiki test set on two CPU cores) into the phrase cache;
# a rerun reads them back.
#   bash benchmarks/baselines.sh [out folder] [extra eval.py overrides...]
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=$(date +%Y-%m-%d_%H-%M-%S)
out=${1:-outputs/bench/baselines/$stamp}   # committed: benchmarks/results/baselines_issue33
if [ -n "$(ls -A "$out" 2>/dev/null)" ]; then  # a run writes into a folder of its own and replaces nothing
  echo "$out already holds a run: pass a new folder (the committed results stay as they are)" >&2; exit 2
fi
shift || true
mkdir -p "$out"
TIMEFORMAT='%U %S %R'
retrievers="[dense,ppr,hipporag,hipporag2,bm25]"

# name, then the data overrides; 2wiki_train_test is the slice's held-out test split.
runs=(
  "musique100 data=musique100"
  "2wiki_test data=2wiki_test"
  "2wiki_dev data=2wiki_dev"
  "2wiki_train_test data=2wiki_train data.split=test"
)
for run in "${runs[@]}"; do
  read -r name overrides <<<"$run"
  # shellcheck disable=SC2086  # the data overrides are separate words
  { time python eval.py $overrides "retriever=$retrievers" output_dir="$out/$name" "$@" \
      >"$out/$name.log" 2>&1; } 2>"$out/${name}_time.txt"
done

{
  echo "# Training-free baselines beside dense retrieval"
  echo
  echo "Command: \`bash benchmarks/baselines.sh $out $*\` ($(date -u +%Y-%m-%d), $(nproc) cores); retrievers $retrievers."
  for run in "${runs[@]}"; do
    read -r name overrides <<<"$run"
    echo
    echo "## $name ($overrides; $(awk '{printf "%.1f min wall", $3 / 60}' "$out/${name}_time.txt"))"
    echo
    sed -n '/^| System | Recall@2/,/^$/p' "$out/$name/results.md"
    grep -h "questions with gold passages\|Holm" "$out/$name/results.md" || true
  done
} >"$out/summary.md"
cat "$out/summary.md"
