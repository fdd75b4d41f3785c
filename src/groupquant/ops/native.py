"""The native (C++/CUDA) kernels: backend choice, just-in-time build and loading.

The extension in ``groupquant/csrc`` is compiled on first use with
``torch.utils.cpp_extension.load`` (ninja) into torch's extension cache, or into
``GROUPQUANT_BUILD_DIR`` when set; a first build prints one line. Where it cannot be built (no
compiler), the PyTorch reference runs instead, after one warning.

``GROUPQUANT_BACKEND`` chooses: unset or ``auto`` (the default: native when it builds, else the
reference with one warning), ``native`` (an error if the build fails) or ``reference`` (never
build, always the PyTorch reference).
"""
from __future__ import annotations

import os
import sys
import threading
import warnings
from pathlib import Path
from typing import List, Optional

import torch

__all__ = ["backend", "native_available", "load", "extension_name", "build_flags", "CSRC", "BACKEND_ENV",
           "BUILD_DIR_ENV"]

BACKEND_ENV = "GROUPQUANT_BACKEND"
BUILD_DIR_ENV = "GROUPQUANT_BUILD_DIR"
BACKENDS = ("auto", "native", "reference")

#: The kernel sources.
CSRC = Path(__file__).resolve().parent.parent / "csrc"
_CPU_SOURCES = ("ops.cpp", "group_quant_cpu.cpp")
_CUDA_SOURCES = ("group_quant_cuda.cu", "group_quant_cuda_ops.cpp")

_lock = threading.Lock()
_state: dict = {"tried": False, "ok": False, "error": None, "cuda": False}


def _requested() -> str:
    """The backend asked for by ``GROUPQUANT_BACKEND`` (``auto`` when unset)."""
    value = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if value not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV} must be one of {BACKENDS}, got {value!r}")
    return value


def _cpu_flags() -> List[str]:
    """Instruction-set flags for the CPU torch itself dispatches to (so the build fits this CPU)."""
    cap = torch.backends.cpu.get_cpu_capability().upper()
    if cap.startswith("AVX512"):
        return ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c",
                "-mprefer-vector-width=512"]
    if cap.startswith("AVX2"):
        return ["-mavx2", "-mfma", "-mf16c"]
    return []


def build_flags() -> List[str]:
    """Host compiler flags: fast, yet exact (no fast-math, no fused multiply-add contraction)."""
    return ["-O3", "-fopenmp", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math"] + _cpu_flags()


def _cuda_build() -> bool:
    """Whether to compile the CUDA sources: a CUDA build of torch, a GPU and a CUDA toolkit."""
    if torch.version.cuda is None or not torch.cuda.is_available():
        return False
    from torch.utils.cpp_extension import CUDA_HOME
    return CUDA_HOME is not None


def extension_name(cuda: bool) -> str:
    """Cache name of the extension: one per CPU capability and CUDA choice."""
    cap = torch.backends.cpu.get_cpu_capability().lower()
    return f"groupquant_ops_{cap}" + ("_cuda" if cuda else "")


def _build_dir(name: str) -> Optional[str]:
    root = os.environ.get(BUILD_DIR_ENV)
    if not root:
        return None
    path = Path(root).expanduser() / name
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _needs_build(name: str, build_dir: Optional[str], sources: List[str]) -> bool:
    """True when no built library newer than the sources is in the cache (so a build will run)."""
    if build_dir is None:
        try:
            from torch.utils.cpp_extension import _get_build_directory  # private: may move
            build_dir = _get_build_directory(name, False)
        except Exception:
            return True
    built = sorted(Path(build_dir).glob(f"{name}*.so"), key=lambda p: p.stat().st_mtime)
    if not built:
        return True
    newest_source = max(Path(s).stat().st_mtime for s in sources + [str(CSRC / "group_quant.h"),
                                                                      str(CSRC / "group_quant_job.h"),
                                                                      str(CSRC / "group_quant_ops.h")])
    return built[-1].stat().st_mtime < newest_source


def _build() -> None:
    from torch.utils import cpp_extension

    cuda = _cuda_build()
    sources = [str(CSRC / s) for s in _CPU_SOURCES + (_CUDA_SOURCES if cuda else ())]
    name = extension_name(cuda)
    build_dir = _build_dir(name)
    if _needs_build(name, build_dir, sources):
        where = build_dir or "torch's extension cache"
        print(f"groupquant: building the native kernels ({'CPU + CUDA' if cuda else 'CPU'}) into {where}; "
              "this happens once", file=sys.stderr, flush=True)
    cuda_flags = ["-O3", "--fmad=false", "-Xcompiler", "-ffp-contract=off"] if cuda else None
    cpp_extension.load(name=name, sources=sources, extra_cflags=build_flags(), extra_cuda_cflags=cuda_flags,
                       extra_ldflags=["-fopenmp"], build_directory=build_dir, is_python_module=False,
                       verbose=False)
    _state["cuda"] = cuda


def load() -> bool:
    """Build (first time) and load the extension and register its fake/autograd kernels.

    Returns whether the native ops are usable. With ``GROUPQUANT_BACKEND=native`` a failed build
    raises; with ``auto`` it warns once and the PyTorch reference is used from then on.
    """
    requested = _requested()
    if requested == "reference":
        return False
    with _lock:
        if not _state["tried"]:
            _state["tried"] = True
            try:
                _build()
                from . import native_ops  # registers fake kernels and autograd on the loaded ops
                native_ops.register()
                _state["ok"] = True
            except Exception as exc:  # a missing compiler surfaces as many different errors
                _state["error"] = exc
                if requested == "auto":
                    warnings.warn(
                        f"groupquant: the native kernels could not be built ({type(exc).__name__}: "
                        f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r}); using the "
                        f"PyTorch reference (slower, same results). Set {BACKEND_ENV}=reference to silence "
                        "this.", RuntimeWarning, stacklevel=3)
    if not _state["ok"] and requested == "native":
        raise RuntimeError(f"{BACKEND_ENV}=native but the native kernels failed to build: {_state['error']}")
    return bool(_state["ok"])


def native_available(device: torch.device) -> bool:
    """Whether the native op serves tensors on ``device`` (loading the extension if needed)."""
    if not load():
        return False
    if device.type == "cpu":
        return True
    return device.type == "cuda" and bool(_state["cuda"])


def backend() -> str:
    """``'native'`` when the C++ kernels are in use (building them if needed), else ``'reference'``."""
    return "native" if load() else "reference"
