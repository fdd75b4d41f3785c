"""The extension's CUDA kernels (csrc/*.cu) built for the CPU and called through ctypes.

``cuda_emulation/cuda_runtime.h`` stands in for CUDA: a launch runs the grid's blocks one after
another with the threads of a block as OS threads, so warp shuffles and ``__syncthreads`` are real
barriers. The sources are the extension's own files; the one change made on the way is C++'s
spelling of a launch (``k<<<grid, block, smem, stream>>>(args)`` becomes
``::gq_emu::launch(k, grid, block, smem, stream, args)``). The library is built once per source
content with the host compiler (``$CXX``, else ``g++``) under ``GROUPQUANT_BUILD_DIR`` or the
temporary folder; without a compiler the tests that need it are skipped.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, Optional

import pytest
import torch

_HERE = Path(__file__).resolve().parent
CSRC = _HERE.parents[1] / "src" / "groupquant" / "csrc"
EMULATION = _HERE / "cuda_emulation"
KERNEL_SOURCES = ("group_quant_cuda.cu", "packed_gemm_cuda.cu")
#: A kernel launch: the kernel (template arguments included), the launch configuration, the "(".
LAUNCH = re.compile(r"(\w+(?:<[^;]*?>)?)<<<(.*?)>>>\(")
_DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_CODE_TYPES = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3}


def rewrite_launches(source: str) -> str:
    """``source`` with every ``k<<<cfg>>>(args)`` spelled ``::gq_emu::launch(k, cfg, args)``."""
    out, n = LAUNCH.subn(r"::gq_emu::launch(\1, \2, ", source)
    if n == 0:
        raise ValueError("no kernel launch found: has the launch syntax changed?")
    return out


class GroupCall(ctypes.Structure):
    """Mirrors ``EmulatedGroupCall`` (cuda_emulation/harness.cpp) field for field."""
    _fields_ = [("params", ctypes.POINTER(ctypes.c_int64)), ("x", ctypes.c_void_p), ("dtype", ctypes.c_int32),
                ("outer", ctypes.c_int64), ("dim_size", ctypes.c_int64), ("inner", ctypes.c_int64),
                ("block_size", ctypes.c_int64), ("num_blocks", ctypes.c_int64), ("out", ctypes.c_void_p),
                ("mask", ctypes.c_void_p), ("codes", ctypes.c_void_p), ("code_type", ctypes.c_int32),
                ("scale", ctypes.c_void_p), ("scale_codes", ctypes.c_void_p), ("tensor_scale", ctypes.c_void_p)]


class PackedCall(ctypes.Structure):
    """Mirrors ``EmulatedPackedCall`` (cuda_emulation/harness.cpp) field for field."""
    _fields_ = [("params", ctypes.POINTER(ctypes.c_int64)), ("data", ctypes.c_void_p), ("scale", ctypes.c_void_p),
                ("value_table", ctypes.c_void_p), ("scale_table", ctypes.c_void_p), ("x", ctypes.c_void_p),
                ("bias", ctypes.c_void_p), ("out", ctypes.c_void_p), ("rows", ctypes.c_int64),
                ("dst", ctypes.c_void_p)]


class TensorScaleCall(ctypes.Structure):
    """Mirrors ``TensorScaleJob`` (csrc/group_quant_job.h) field for field."""
    _fields_ = [("lo", ctypes.c_void_p), ("hi", ctypes.c_void_p), ("dtype", ctypes.c_int32),
                ("divisor", ctypes.c_float), ("g", ctypes.c_void_p)]


_LIBRARY: Dict[str, ctypes.CDLL] = {}


def _build(folder: Path) -> Path:
    """Compiles the rewritten kernel sources and the harness into ``folder/emulated_cuda.so``."""
    compiler = os.environ.get("CXX") or shutil.which("g++")
    if not compiler:
        pytest.skip("no host C++ compiler (g++ or $CXX) to build the emulated CUDA kernels")
    folder.mkdir(parents=True, exist_ok=True)
    sources = [str(EMULATION / "harness.cpp")]
    for name in KERNEL_SOURCES:
        path = folder / (name[:-3] + "_emulated.cpp")
        path.write_text(f'#line 1 "{CSRC / name}"\n' + rewrite_launches((CSRC / name).read_text()))
        sources.append(str(path))
    target = folder / "emulated_cuda.so"
    tmp = folder / f"emulated_cuda.{os.getpid()}.so"
    # no contraction into fused multiply-adds (the CPU build's rule); a load or store through a
    # pointer not aligned for its type (a 16-byte vector run from an unaligned address: on a GPU,
    # "misaligned address") ends the process with the source line, by the alignment sanitizer
    cmd = [compiler, "-std=c++20", "-O1", "-ffp-contract=off", "-fno-strict-aliasing", "-pthread", "-shared",
           "-fPIC", "-fsanitize=alignment", "-fno-sanitize-recover=alignment", f"-I{EMULATION}", f"-I{CSRC}",
           *sources, "-o", str(tmp)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError("building the emulated CUDA kernels failed:\n" + done.stderr[-4000:])
    tmp.replace(target)
    return target


def library() -> ctypes.CDLL:
    """The emulated kernels, built when their sources changed."""
    digest = hashlib.sha256()
    for path in [EMULATION / "harness.cpp", EMULATION / "cuda_runtime.h", *sorted(CSRC.glob("*.h")),
                 *(CSRC / n for n in KERNEL_SOURCES), Path(__file__)]:
        digest.update(path.name.encode() + path.read_bytes())
    key = digest.hexdigest()[:16]
    if key not in _LIBRARY:
        root = Path(os.environ.get("GROUPQUANT_BUILD_DIR") or tempfile.gettempdir())
        folder = root / f"groupquant-emulated-cuda-{key}"
        target = folder / "emulated_cuda.so"
        if not target.exists():
            _build(folder)
        lib = ctypes.CDLL(str(target))
        for name, arg in (("gq_emulated_group_quant", GroupCall), ("gq_emulated_packed", PackedCall),
                          ("gq_emulated_tensor_scale", TensorScaleCall)):
            getattr(lib, name).argtypes = [ctypes.POINTER(arg)]
            getattr(lib, name).restype = ctypes.c_int
        _LIBRARY[key] = lib
    return _LIBRARY[key]


def _ptr(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


def _params(values) -> ctypes.Array:
    return (ctypes.c_int64 * len(values))(*values)


def group_op(x: torch.Tensor, params, *, dim: int, block_size: int, tensor_scale: Optional[torch.Tensor],
             out: Optional[torch.Tensor] = None, mask: Optional[torch.Tensor] = None,
             codes: Optional[torch.Tensor] = None, scale: Optional[torch.Tensor] = None,
             scale_codes: Optional[torch.Tensor] = None) -> None:
    """Runs the CUDA source's group kernel on contiguous ``x`` (any storage offset) grouped along
    ``dim`` in blocks of ``block_size``, filling the given outputs (shapes as the op allocates them:
    ``out`` / ``mask`` like x; ``codes`` ``[outer, k, block, inner]``; ``scale`` / ``scale_codes``
    ``[outer, k, inner]``)."""
    lib = library()
    assert len(params) == lib.gq_emulated_num_params()
    assert x.is_contiguous() and all(t is None or t.is_contiguous() for t in (out, mask, codes, scale, scale_codes))
    d = dim % x.dim()
    dim_size = x.shape[d]
    block = min(block_size, max(dim_size, 1))
    call = GroupCall(params=_params(params), x=x.data_ptr(), dtype=_DTYPE_CODES[x.dtype],
                     outer=int(torch.tensor(x.shape[:d]).prod()), dim_size=dim_size,
                     inner=int(torch.tensor(x.shape[d + 1:]).prod()), block_size=block,
                     num_blocks=-(-dim_size // block), out=_ptr(out), mask=_ptr(mask), codes=_ptr(codes),
                     code_type=_CODE_TYPES[codes.dtype] if codes is not None else 0, scale=_ptr(scale),
                     scale_codes=_ptr(scale_codes), tensor_scale=_ptr(tensor_scale))
    rc = lib.gq_emulated_group_quant(ctypes.byref(call))
    assert rc == 0, f"emulated group kernel returned {rc}"


def tensor_scale_op(lo: torch.Tensor, hi: torch.Tensor, divisor: float) -> torch.Tensor:
    """The CUDA source's tensor-scale kernel on x's least and greatest values (0-d, x's dtype):
    ``g`` (0-d float32)."""
    g = torch.full((), 77.0)
    call = TensorScaleCall(lo=lo.data_ptr(), hi=hi.data_ptr(), dtype=_DTYPE_CODES[lo.dtype], divisor=divisor,
                           g=g.data_ptr())
    rc = library().gq_emulated_tensor_scale(ctypes.byref(call))
    assert rc == 0, f"emulated tensor-scale kernel returned {rc}"
    return g


def packed_op(params, data: torch.Tensor, scale: torch.Tensor, value_table: torch.Tensor,
              scale_table: torch.Tensor, *, x: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
              out: Optional[torch.Tensor] = None, dst: Optional[torch.Tensor] = None) -> None:
    """Runs the CUDA source's packed GEMM (``dst`` None: ``out = x @ W.T + bias`` with x float32
    ``[M, num_blocks * block_size]``) or its decode (into ``dst``, float32 ``[N, num_blocks * block_size]``)."""
    lib = library()
    assert len(params) == lib.gq_emulated_num_packed_params()
    call = PackedCall(params=_params(params), data=data.data_ptr(), scale=scale.data_ptr(),
                      value_table=value_table.data_ptr(), scale_table=scale_table.data_ptr(), x=_ptr(x),
                      bias=_ptr(bias), out=_ptr(out), rows=0 if x is None else x.shape[0], dst=_ptr(dst))
    rc = lib.gq_emulated_packed(ctypes.byref(call))
    assert rc == 0, f"emulated packed kernel returned {rc}"
