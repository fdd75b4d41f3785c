"""``GROUPQUANT_CPU_PATH``: the value asked for, checked, and its application to the loaded
extension (read once by :func:`groupquant.ops.native.load`). The queries and the ``with`` switch
are in :mod:`.packed_gemm_cpu_path`.
"""
from __future__ import annotations

import os

import torch

__all__ = ["CPU_PATH_ENV", "CPU_PATHS", "CpuPathSettingError", "requested_cpu_path", "apply_requested"]

CPU_PATH_ENV = "GROUPQUANT_CPU_PATH"
#: The values of ``GROUPQUANT_CPU_PATH``; the kernel paths, best first.
CPU_PATHS = ("auto", "avx512_bf16", "avx512", "avx2", "scalar")


class CpuPathSettingError(ValueError):
    """``GROUPQUANT_CPU_PATH`` holds a value that is not a CPU path (or one the host lacks)."""


def requested_cpu_path() -> str:
    """The path asked for by ``GROUPQUANT_CPU_PATH`` (``auto`` when unset or empty)."""
    value = os.environ.get(CPU_PATH_ENV, "auto").strip().lower() or "auto"
    if value not in CPU_PATHS:
        raise CpuPathSettingError(f"{CPU_PATH_ENV} must be one of {', '.join(CPU_PATHS)}, got {value!r} "
                                  "(unset it for 'auto')")
    return value


def apply_requested(path: str) -> None:
    """Sets the loaded extension's path from the value of ``GROUPQUANT_CPU_PATH`` (``path``, already
    checked); CpuPathSettingError naming the variable if the host lacks it."""
    if path == "auto":
        return
    have = torch.ops.groupquant.packed_cpu_paths().split(",")
    if path not in have:
        raise CpuPathSettingError(f"{CPU_PATH_ENV}={path} but this CPU (or build) has only {', '.join(have)}")
    torch.ops.groupquant.packed_set_cpu_path(path)
