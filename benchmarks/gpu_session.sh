#!/usr/bin/env bash
# Everything the GPU checks of issue 23 need, in one call on a lent GPU machine (the `device` tool),
# with logs under $OUT. Prepare here first (the GPU machine has no network):
#     make gpu-wheels          # the missing packages as wheels for its Python 3.12 into .wheels/
# then run, carrying .wheels:
#     bash benchmarks/gpu_session.sh            (run(command=..., carry=[".wheels"], timeout_s=600))
# Steps, each timed and logged to $OUT/<step>.log: install the carried wheels into /tmp/site (the
# machine's own Python, which holds torch 2.11 + CUDA and transformers, stays as it is), build the
# extension with its CUDA kernels, run every test that touches CUDA (CPU vs CUDA bit for bit, CUDA
# layers, workflows, compile), then bench_cuda.py and ptq_speed.py (SmolLM2-135M's architecture).
# A failing step does not stop the next one: each step's exit code is in $OUT/summary.txt. Steps
# run in the order of what matters most (parity, the two speed tables, ptq, the wider test sets);
# the whole list may not fit one 600 s call: `bash benchmarks/gpu_session.sh STEP...` runs only the
# named steps (after env, wheels and build, which reuses the build of a machine still warm), for a
# second call straight after the first. A 15-minute device budget fits two calls, for example
#     bash benchmarks/gpu_session.sh cuda_tests bench_ops                  (timeout_s 560)
#     bash benchmarks/gpu_session.sh bench_train memory_peak ptq_speed     (timeout_s 420)
# (ptq_speed runs mxfp8 first: the one recipe no card has timed yet).
set -uo pipefail
OUT=${OUT:-/tmp/groupquant-gpu}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export GROUPQUANT_BUILD_DIR="$PWD/build/gpu" PYTHONUNBUFFERED=1
mkdir -p "$GROUPQUANT_BUILD_DIR"
summary="$OUT/summary.txt"
touch "$summary"
wanted=("$@")

step() {  # step NAME COMMAND...: run (unless other steps were named), log to $OUT/NAME.log, record rc and seconds
  local name=$1; shift
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " env wheels build ${wanted[*]} " =~ " $name " ]]; then return; fi
  local t0=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$summary"
}

step env bash -c 'nvidia-smi; python3 -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"; python3 -m pip list 2>/dev/null | grep -iE "^(torch|transformers|numpy|pytest|hypothesis|ml.dtypes|safetensors|triton) "'
step wheels bash -c 'ls .wheels && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .wheels/*.whl'
export PYTHONPATH="$PWD/src:/tmp/site"
# microxcaling (not on PyPI) travels as its source folder where `make gpu-wheels MICROXCALING=...` put it
if [ -d .wheels/microxcaling/mx ]; then export PYTHONPATH="$PYTHONPATH:$PWD/.wheels/microxcaling"; fi
step build python3 -c "import torch; from groupquant.ops import native; print(native.load(), native.native_available(torch.device('cuda')), native._state)"
step cuda_tests timeout 240 python3 -m pytest -q -rs --no-header --durations=10 -p no:cacheprovider \
    tests/ops/test_device_parity.py tests/nn/test_cuda_layers.py tests/cuda
step bench_ops timeout 240 python3 benchmarks/bench_cuda.py --ops
step bench_train timeout 150 python3 benchmarks/bench_cuda.py --train
step memory_peak timeout 90 python3 benchmarks/cuda_memory_peak.py
step ptq_speed timeout 150 python3 benchmarks/ptq_speed.py --device cuda --random-weights --recipes mxfp8 mxfp4 nvfp4
# the wider sets: only the files that name CUDA or a device (collecting the whole tree takes minutes)
named=$(grep -rlE --include="test_*.py" "cuda|def test_\w*device" tests | grep -v emulated | sort)
compiled=$(grep -rlE --include="test_*.py" "def test_\w*(compile|fullgraph)" tests/ops tests/nn tests/export | sort)
step cuda_named_tests timeout 180 python3 -m pytest -q -rs --no-header -p no:cacheprovider --continue-on-collection-errors \
    -k "cuda or CUDA or device" $named
# microxcaling's own CUDA kernels as table 1's peer (torch builds them on first use: a minute or two)
step mx_custom_cuda timeout 300 python3 benchmarks/bench_cuda.py --ops --mx-custom-cuda --peers microxcaling
step compile_tests timeout 180 python3 -m pytest -q -rs --no-header -p no:cacheprovider --continue-on-collection-errors \
    -k "compile or fullgraph" $compiled
cat "$summary"
