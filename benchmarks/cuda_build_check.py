"""Build the extension with its CUDA sources and load it, on a machine without a GPU.

The lent GPU machines run torch 2.11.0+cu130; so does the oldest-torch environment of `make test`
(`.venv-torch-oldest`, PyPI's CUDA wheel). With nvcc (CUDA 13) installed, this compiles every
source the GPU build compiles (the CPU files, csrc/*.cu, the CUDA op registrations), links the
library against torch's CUDA libraries, loads it and checks that each groupquant op has a CUDA
kernel: the build errors a GPU session would otherwise spend its minutes on, found here.

    CUDA_HOME=/usr/local/cuda TORCH_CUDA_ARCH_LIST=9.0 .venv-torch-oldest/bin/python benchmarks/cuda_build_check.py

(``make cuda-build-check`` runs that line.) Builds into ``GROUPQUANT_BUILD_DIR`` (default
``build/cuda-check``); 5-8 minutes on 2 cores the first time. Exit status 0 when every op has a
CUDA kernel. Nothing runs on a GPU: what the kernels compute is tested by
tests/csrc/test_cuda_kernels_emulated.py (CPU) and tests/ops/test_device_parity.py (GPU).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("GROUPQUANT_BUILD_DIR", str(ROOT / "build" / "cuda-check"))
os.environ["GROUPQUANT_BACKEND"] = "native"  # a failed build raises instead of falling back

import torch  # noqa: E402

from groupquant.ops import native  # noqa: E402
from groupquant.ops.native_ops import OP_NAMES  # noqa: E402


def main() -> int:
    if torch.version.cuda is None:
        print(f"torch {torch.__version__} is not a CUDA build: run this with .venv-torch-oldest/bin/python")
        return 2
    from torch.utils.cpp_extension import CUDA_HOME
    if CUDA_HOME is None:
        print("no CUDA toolkit found: set CUDA_HOME (e.g. /usr/local/cuda)")
        return 2
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), toolkit {CUDA_HOME}, "
          f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '(all of the build)')}", flush=True)
    native._cuda_build = lambda: True  # the build's own rule asks for a GPU; this check has none
    started = time.perf_counter()
    native.load()
    print(f"built and loaded in {time.perf_counter() - started:.0f} s: {native._state}")
    missing = [op for op in OP_NAMES if "\nCUDA:" not in torch._C._dispatch_dump(op)]
    for op in OP_NAMES:
        print(f"{op}: {'no CUDA kernel' if op in missing else 'CUDA kernel registered'}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
