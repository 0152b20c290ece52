#!/usr/bin/env bash
# The GPU check: one script for a lent GPU machine as it comes (its own python3, torch, transformers,
# torch-geometric, lightning; no package index), plus the wheelhouse benchmarks/gpu_wheelhouse.sh builds
# (.whl/, carried). Each step is one of the benchmark programs below at its `--size check`, under its own
# `timeout`, and writes one JSON file under $OUT, so a step that runs out of time loses only itself; the
# limits add up to under 9 minutes. benchmarks/RESULTS.md ("GPU check") says what each step measures.
#
#   OUT=/tmp/gpu_check bash benchmarks/gpu_check.sh            # on the GPU machine ($OUT: the device's folder)
#   OUT=/tmp/gpu_check bash benchmarks/gpu_check.sh --dry-run  # the same steps, tiny, on the CPU (tests/test_gpu_check.py)
#
# $OUT then holds gnn.json, glm.json, glm_mpnet.json, glm_bf16_mixed.json, train_throughput.json, backend_check.json
# (each with an `errors` list), summary.json (per step: exit code, wall seconds, whether it timed out, its errors)
# and gpu_check.log (every step's output): 8 files, the most a device call brings back.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DRY=0
case "${1:-}" in
    "") ;;
    --dry-run) DRY=1 ;;
    *) echo "usage: bash benchmarks/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac
OUT="${OUT:-$ROOT/benchmarks/results/gpu_check}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
LOG="$OUT/gpu_check.log"
: >"$LOG"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

MIXED_TOKENS=()
MPNET_MODEL=mpnet-large
if [ "$DRY" = 1 ]; then
    MPNET_MODEL=mpnet-tiny
    SIZE=dry
    DEVICE=cpu
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
else
    SIZE=check
    DEVICE=cuda
    MIXED_TOKENS=(--tokens 3300) # 600 triplets, what training reads (the glm step also times 6,600 tokens)
    if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
        SITE=/tmp/gpu_check_site
        if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
            "$ROOT"/.whl/*.whl >>"$LOG" 2>&1; then
            export PYTHONPATH="$SITE:$PYTHONPATH"
        else
            echo "gpu_check.sh: installing .whl/ failed (see $LOG); steps that need Hydra will record the error" >>"$LOG"
        fi
    else
        echo "gpu_check.sh: no .whl/ (bash benchmarks/gpu_wheelhouse.sh, then carry .whl): no Hydra here" >>"$LOG"
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>"$LOG" 2>&1
fi
"$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'cuda', torch.cuda.is_available())" >>"$LOG" 2>&1

RESULTS=()
# step NAME SECONDS PROGRAM ARGS...: run one benchmark program under its own limit, output into the log.
step() {
    local name="$1" limit="$2"
    shift 2
    local start end rc
    echo "== $name (limit ${limit}s): $*" >>"$LOG"
    start="$(date +%s.%N)"
    timeout -k 3 "$limit" "$PY" "$@" --size "$SIZE" --device "$DEVICE" --out "$OUT/$name.json" >>"$LOG" 2>&1
    rc=$?
    end="$(date +%s.%N)"
    echo "== $name: exit $rc" >>"$LOG"
    RESULTS+=("$name" "$rc" "$start" "$end")
}

START="$(date +%s.%N)"
# Limits: 45 + 200 + 60 + 90 + 100 + 45 = 540 s, and at most 3 s more each for a step that ignores SIGTERM.
step gnn 45 benchmarks/gpu_gnn.py
step glm 200 benchmarks/gpu_glm.py
# The MPNet-GLM (glmrag's offline backbone) at T5-large's width and depth, against plain MPNet.
step glm_mpnet 60 benchmarks/gpu_glm.py --models "$MPNET_MODEL" --paths flex-global eager-global plain
step glm_bf16_mixed 90 benchmarks/gpu_glm.py --dtype bf16-mixed --paths flex-global eager-global \
    --modes step step_ckpt ${MIXED_TOKENS[@]+"${MIXED_TOKENS[@]}"}
step train_throughput 100 benchmarks/gpu_train_throughput.py
step backend_check 45 benchmarks/gpu_glm.py --backend-check-only

"$PY" - "$OUT" "$SIZE" "$START" "${RESULTS[@]}" <<'EOF'
import json
import sys
import time
from pathlib import Path

out, size, start, rest = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4:]
steps = {}
for name, rc, begin, end in zip(rest[0::4], rest[1::4], rest[2::4], rest[3::4], strict=True):
    path = out / f"{name}.json"
    entry = {"exit_code": int(rc), "timed_out": int(rc) in (124, 137), "wall_s": round(float(end) - float(begin), 1)}
    try:
        data = json.loads(path.read_text())
        entry |= {"device": data.get("device"), "errors": data.get("errors", [])}
    except (OSError, ValueError) as err:
        entry |= {"device": None, "errors": [{"where": "json", "error": f"{path.name}: {type(err).__name__}: {err}"}]}
    steps[name] = entry
summary = {"size": size, "wall_s": round(time.time() - start, 1), "steps": steps}
summary["ok"] = all(s["exit_code"] == 0 and not s["errors"] for s in steps.values())
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps(summary, indent=2))
raise SystemExit(0 if summary["ok"] else 1)
EOF
