"""The instruction-set path of the packed-GEMM CPU kernels: ``GROUPQUANT_CPU_PATH``.

The extension holds AVX-512, AVX2 and scalar kernels and takes, at run time, the best one the
host's CPU has (``csrc/packed_gemm_cpu_path.h``). ``GROUPQUANT_CPU_PATH`` forces one:

- unset or ``auto``: the best the host has (AVX-512 with BF16, else AVX-512 F/BW/VL/DQ, else
  AVX2 + FMA, else scalar);
- ``avx512_bf16``: the AVX-512 kernels, and for bfloat16 inputs the AVX-512 BF16 (``vdpbf16ps``)
  kernel of 4-bit weights (``csrc/packed_gemm_stream_avx512_bf16.cpp``);
- ``avx512``: the AVX-512 kernels only (bfloat16 inputs are widened to float32: the BF16 kernel is off);
- ``avx2``, ``scalar``: that path; an error when the native kernels load if the host (or the
  build: not x86) has no such path.

The variable is read once, when the native kernels are first loaded (:mod:`.native_cpu_path`); a
value that is not a path is a :class:`CpuPathSettingError` naming the variable and the values. :func:`cpu_path` switches
the path for a ``with`` block (tests run every path the host has this way). Every path decodes
the weight bit for bit as the reference decode; linear outputs differ between paths only in the
float32 summation order (see docs/packed-inference.md, "Kernels and when packing is faster").
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Tuple

import torch

from . import native
from .native_cpu_path import CPU_PATH_ENV, CPU_PATHS, CpuPathSettingError, requested_cpu_path

__all__ = ["CPU_PATH_ENV", "CPU_PATHS", "CpuPathSettingError", "requested_cpu_path", "available_cpu_paths",
           "active_cpu_path", "set_cpu_path", "cpu_path"]


def _loaded() -> bool:
    return native.native_available(torch.device("cpu"))


def available_cpu_paths() -> Tuple[str, ...]:
    """The paths this host (and build) has, best first; ``()`` when the native kernels are not in use."""
    if not _loaded():
        return ()
    return tuple(torch.ops.groupquant.packed_cpu_paths().split(","))


def active_cpu_path() -> str:
    """The path the CPU kernels take now (``'reference'`` when the native kernels are not in use)."""
    if not _loaded():
        return "reference"
    return str(torch.ops.groupquant.packed_cpu_path())


def set_cpu_path(path: str) -> str:
    """Makes the CPU kernels take ``path`` (``auto``: the best available); returns the path taken
    before. ValueError if the host has no such path."""
    if path not in CPU_PATHS:
        raise CpuPathSettingError(f"CPU path must be one of {', '.join(CPU_PATHS)}, got {path!r}")
    if not _loaded():
        raise RuntimeError("groupquant: the native kernels are not in use, so there is no CPU path to set")
    before = active_cpu_path()
    torch.ops.groupquant.packed_set_cpu_path(available_cpu_paths()[0] if path == "auto" else path)
    return before


@contextmanager
def cpu_path(path: str) -> Iterator[str]:
    """``with cpu_path("avx2"):`` the CPU kernels take ``path`` inside the block (then the one before)."""
    before = set_cpu_path(path)
    try:
        yield path
    finally:
        torch.ops.groupquant.packed_set_cpu_path(before)

