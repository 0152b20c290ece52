#!/usr/bin/env bash
# Build the wheelhouse benchmarks/gpu_check.sh installs on the GPU machine: the pure-Python packages its
# steps import that the machine's image lacks (compared with /work/.library/device/KINDS.md's package list:
# it has torch, transformers, torch-geometric, lightning, tokenizers, numpy, scipy, pyarrow, pyyaml; it has no
# hydra-core, omegaconf or antlr4-python3-runtime, which gpu_train_throughput.py composes its configs with).
# The versions are the ones installed here, so both machines read the configs alike. About 0.4 MB of the
# 64 MiB a device call may carry; the folder is git-ignored (.gitignore: /.whl/).
#
#   bash benchmarks/gpu_wheelhouse.sh          # writes .whl/ in the repository root
#   then: run(command="bash benchmarks/gpu_check.sh", carry=[".whl"])
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
DEST="${1:-$ROOT/.whl}"
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
HYDRA="$(version hydra-core)"
OMEGACONF="$(version omegaconf)"
ANTLR="$(version antlr4-python3-runtime)"
rm -rf "$DEST"
mkdir -p "$DEST"
# The GPU machine: CPython 3.12 on x86-64 (pure-Python wheels fit any platform; pip wants one named).
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform any -d "$DEST" \
    "hydra-core==$HYDRA" "omegaconf==$OMEGACONF"
# antlr4-python3-runtime 4.9.x (omegaconf's pin) is published as a source archive only: build its
# pure-Python wheel here.
"$PY" -m pip wheel --no-deps -w "$DEST" "antlr4-python3-runtime==$ANTLR"
ls -l "$DEST"
SIZE_KB="$(du -sk "$DEST" | cut -f1)"
if [ "$SIZE_KB" -gt $((60 * 1024)) ]; then
    echo "gpu_wheelhouse.sh: $DEST holds ${SIZE_KB} KiB, too close to the 64 MiB a device call carries" >&2
    exit 1
fi
echo "wheelhouse: $DEST (${SIZE_KB} KiB)"
