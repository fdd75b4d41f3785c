#!/usr/bin/env bash
# Everything the GPU checks of issue 23 need, in one call on a lent GPU machine (the `device` tool),
# with logs under $OUT. Prepare here first (the GPU machine has no network):
#     make gpu-wheels          # dependencies 2.0.1 and torchao 0.18 wheels into .wheels/
# then run, carrying .wheels:
#     bash benchmarks/gpu_session.sh            (run(command=..., carry=[".wheels"]))
# Steps, each timed and logged: install the carried wheels into the machine's Python (torch comes
# with the machine), build the extension with its CUDA kernels, run every test that touches CUDA
# (CPU vs CUDA bit for bit, CUDA layers, packed and scale formats on CUDA), then bench_cuda.py.
# A failing step does not stop the next one: each step's exit code is in $OUT/summary.txt.
set -uo pipefail
OUT=${OUT:-/tmp/groupquant-gpu}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src" GROUPQUANT_BUILD_DIR="$PWD/build/gpu" PYTHONUNBUFFERED=1
mkdir -p "$GROUPQUANT_BUILD_DIR"
summary="$OUT/summary.txt"
: > "$summary"

step() {  # step NAME COMMAND...: run, log to $OUT/NAME.log, record rc and seconds
  local name=$1; shift
  local t0=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc ${SECONDS}s-${t0}s=$((SECONDS - t0))s" | tee -a "$summary"
}

step env bash -c 'nvidia-smi; python -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"'
step wheels bash -c 'ls .wheels && python -m pip install --no-index --no-deps .wheels/*.whl'
step build python -c "import torch; from groupquant.ops import native; print(native.load(), native.native_available(torch.device('cuda')), native._state)"
step cuda_tests python -m pytest -q -rs -x --no-header -p no:cacheprovider \
    tests/ops/test_device_parity.py tests/nn/test_cuda_layers.py tests/cuda
step cuda_named_tests python -m pytest -q -rs --no-header -p no:cacheprovider -k "cuda or CUDA or device" tests
step compile_tests python -m pytest -q -rs --no-header -p no:cacheprovider -k "compile" tests/ops tests/nn tests/export
step bench timeout 420 python benchmarks/bench_cuda.py
cat "$summary"
