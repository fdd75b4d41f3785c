"""The native ops from Python: fake (meta) kernels and calls from a :class:`GroupSpec`.

The schemas and the CPU/CUDA kernels are registered by the C++ extension (csrc/ops.cpp) once
:func:`groupquant.ops.native.load` has loaded it. Every op takes ``(x, params, ...)``, ``params``
being the packed :class:`~.kernel_params.KernelParams` (:func:`~.kernel_params.op_params`).
:func:`register` checks that the extension's record has the same fields, then adds

- fake kernels, so ``torch.compile(fullgraph=True)`` traces through the ops.

Their autograd is C++ (csrc/autograd.cpp, no Python per call): ``group_fake_quant`` passes the gradient straight through; ``group_fake_quant_masked``
  (the clipped straight-through estimator) multiplies it by the bool mask it returned, zero where
  the element saturated; ``group_fake_quant_scale`` (values, optional mask and the per-group
  float32 scales from the same pass) does either, by its ``want_mask`` flag. Nothing else is saved
  for backward (1 byte per element at most).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from .codes import code_dtype
from .fake_quant_result import FakeQuantResult
from .kernel_params import check_field_names, field_index, op_params
from .quantized import GroupQuantized
from .reference import GroupSpec, tensor_scale_for

__all__ = ["register", "op_params", "native_fake_quant", "native_fake_quant_with_scale", "native_quantize", "OP_NAMES"]

OP_NAMES = ("groupquant::group_fake_quant", "groupquant::group_fake_quant_masked", "groupquant::group_quantize",
            "groupquant::group_fake_quant_scale")
_registered = {"done": False}


# ---- fake kernels ------------------------------------------------------------------------------

def _grouped_shape(x: torch.Tensor, params: Sequence[int], middle: Optional[int]) -> List[int]:
    """``x.shape[:d] + [k, middle] + x.shape[d+1:]`` for the grouping in ``params`` (middle None:
    the block size), with the block size resolved as the kernels do (at most the dim's size)."""
    d = params[field_index("dim")] % x.dim()
    size = x.shape[d]
    block = torch.sym_min(params[field_index("block_size")], torch.sym_max(size, 1))
    k = (size + block - 1) // block
    return list(x.shape[:d]) + [k, block if middle is None else middle] + list(x.shape[d + 1:])


def _fake_fake_quant(x, params, tensor_scale=None):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _fake_fake_quant_masked(x, params, tensor_scale=None):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return out, torch.empty(x.shape, dtype=torch.bool, device=x.device)


def _fake_fake_quant_scale(x, params, want_mask, tensor_scale=None):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mask = torch.empty(x.shape if want_mask else (0,), dtype=torch.bool, device=x.device)
    scale = torch.empty(_grouped_shape(x, params, 1), dtype=torch.float32, device=x.device)
    return out, mask, scale


def _fake_quantize(x, params, code_dtype, tensor_scale=None):
    codes = torch.empty(_grouped_shape(x, params, None), dtype=code_dtype, device=x.device)
    scale_shape = _grouped_shape(x, params, 1)
    scale = torch.empty(scale_shape, dtype=torch.float32, device=x.device)
    return codes, scale, torch.empty(scale_shape, dtype=torch.uint8, device=x.device)


def register() -> None:
    """Add fake kernels to the ops the extension defined (once per process); their autograd is
    registered in C++ (csrc/autograd.cpp)."""
    if _registered["done"]:
        return
    check_field_names(torch.ops.groupquant.kernel_param_fields().split(","))
    torch.library.register_fake(OP_NAMES[0])(_fake_fake_quant)
    torch.library.register_fake(OP_NAMES[1])(_fake_fake_quant_masked)
    torch.library.register_fake(OP_NAMES[2])(_fake_quantize)
    torch.library.register_fake(OP_NAMES[3])(_fake_fake_quant_scale)
    _registered["done"] = True


# ---- calls -------------------------------------------------------------------------------------

def native_fake_quant(x: torch.Tensor, spec: GroupSpec, ste: str = "identity") -> torch.Tensor:
    """Fake-quantize ``x`` by ``spec`` with the native op; gradient by ``ste`` (identity / clipped)."""
    params = op_params(spec, x.dtype)
    ts = tensor_scale_for(x, spec)
    if ste == "clipped" and torch.is_grad_enabled() and x.requires_grad:
        return torch.ops.groupquant.group_fake_quant_masked(x, params, ts)[0]
    return torch.ops.groupquant.group_fake_quant(x, params, ts)


def native_fake_quant_with_scale(x: torch.Tensor, spec: GroupSpec, ste: str = "identity") -> FakeQuantResult:
    """:func:`native_fake_quant` plus the float32 scales (``spec.layout.scale_shape``) from the same pass
    (and the per-tensor scale of two-level scaling)."""
    want_mask = ste == "clipped" and torch.is_grad_enabled() and x.requires_grad
    ts = tensor_scale_for(x, spec)
    out, _mask, scale = torch.ops.groupquant.group_fake_quant_scale(x, op_params(spec, x.dtype), want_mask, ts)
    return FakeQuantResult(out, scale, tensor_scale=ts)


def native_quantize(x: torch.Tensor, spec: GroupSpec) -> GroupQuantized:
    """Codes and shared scales of ``x`` by ``spec`` with the native op (contracted layout)."""
    ts = tensor_scale_for(x, spec)
    codes, scale, scale_codes = torch.ops.groupquant.group_quantize(x.detach(), op_params(spec, x.dtype),
                                                                   code_dtype(spec.fmt), ts)
    keep_codes = scale_codes if spec.scale_format.is_coded else None
    return GroupQuantized(codes, scale, keep_codes, spec.fmt, spec.layout, x.dtype, spec.scale_format, ts)
