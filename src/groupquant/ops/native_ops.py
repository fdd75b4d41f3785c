"""The native ops from Python: fake (meta) kernels, autograd, and calls from a :class:`GroupSpec`.

The schemas and the CPU/CUDA kernels are registered by the C++ extension (csrc/ops.cpp) once
:func:`groupquant.ops.native.load` has loaded it; :func:`register` then adds

- fake kernels, so ``torch.compile(fullgraph=True)`` traces through the ops;
- autograd: ``group_fake_quant`` passes the gradient straight through; ``group_fake_quant_masked``
  (the clipped straight-through estimator) multiplies it by the bool mask it returned, zero where
  the element saturated. Nothing else is saved for backward (1 byte per element at most).
"""
from __future__ import annotations

from typing import Tuple

import torch

from .codes import code_dtype
from .kernel_format import kernel_format
from .quantized import GroupQuantized
from .reference import GroupSpec
from .shared_scale import exponent_cap

__all__ = ["register", "op_args", "native_fake_quant", "native_quantize", "OP_NAMES"]

OP_NAMES = ("groupquant::group_fake_quant", "groupquant::group_fake_quant_masked", "groupquant::group_quantize")
_N_ARGS = 22  # inputs of the fake-quant ops (x + 21 settings)
_registered = {"done": False}


def op_args(spec: GroupSpec, dtype: torch.dtype) -> Tuple[object, ...]:
    """The op arguments after ``x`` (of ``dtype``) for ``spec``, in schema order."""
    layout = spec.layout
    seed = 0 if spec.seed is None else int(spec.seed)
    return ((layout.dim, layout.block_size) + kernel_format(spec.fmt).op_args()
            + (exponent_cap(dtype, spec.fmt), spec.scale_mode, spec.rounding, seed))


# ---- fake kernels ------------------------------------------------------------------------------

def _fake_fake_quant(x, dim, block_size, is_float, is_signed, exponent_bits, mantissa_bits, bias, emin, emax,
                     max_normal, qmin, qmax, frac_bits, special, nan_code, even_bits, negative_zero, exp_max,
                     scale_mode, rounding, seed):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _fake_fake_quant_masked(x, dim, block_size, is_float, is_signed, exponent_bits, mantissa_bits, bias, emin,
                            emax, max_normal, qmin, qmax, frac_bits, special, nan_code, even_bits, negative_zero,
                            exp_max, scale_mode, rounding, seed):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return out, torch.empty(x.shape, dtype=torch.bool, device=x.device)


def _grouped_shape(x: torch.Tensor, dim: int, block_size: int, middle: int) -> list:
    d = dim % x.dim()
    k = (x.shape[d] + block_size - 1) // block_size
    return list(x.shape[:d]) + [k, middle] + list(x.shape[d + 1:])


def _fake_quantize(x, dim, block_size, is_float, is_signed, exponent_bits, mantissa_bits, bias, emin, emax,
                   max_normal, qmin, qmax, frac_bits, special, nan_code, even_bits, negative_zero, exp_max,
                   scale_mode, rounding, seed, code_dtype):
    codes = torch.empty(_grouped_shape(x, dim, block_size, block_size), dtype=code_dtype, device=x.device)
    scale_shape = _grouped_shape(x, dim, block_size, 1)
    scale = torch.empty(scale_shape, dtype=torch.float32, device=x.device)
    return codes, scale, torch.empty(scale_shape, dtype=torch.uint8, device=x.device)


# ---- autograd ----------------------------------------------------------------------------------

def _backward_identity(ctx, grad):
    return (grad,) + (None,) * (_N_ARGS - 1)


def _setup_masked(ctx, inputs, output):
    ctx.save_for_backward(output[1])


def _backward_masked(ctx, grad, _grad_mask):
    (inside,) = ctx.saved_tensors
    return (grad * inside.to(grad.dtype),) + (None,) * (_N_ARGS - 1)


def register() -> None:
    """Add fake kernels and autograd to the ops the extension defined (once per process)."""
    if _registered["done"]:
        return
    torch.library.register_fake(OP_NAMES[0])(_fake_fake_quant)
    torch.library.register_fake(OP_NAMES[1])(_fake_fake_quant_masked)
    torch.library.register_fake(OP_NAMES[2])(_fake_quantize)
    torch.library.register_autograd(OP_NAMES[0], _backward_identity)
    torch.library.register_autograd(OP_NAMES[1], _backward_masked, setup_context=_setup_masked)
    _registered["done"] = True


# ---- calls -------------------------------------------------------------------------------------

def native_fake_quant(x: torch.Tensor, spec: GroupSpec, ste: str = "identity") -> torch.Tensor:
    """Fake-quantize ``x`` by ``spec`` with the native op; gradient by ``ste`` (identity / clipped)."""
    args = op_args(spec, x.dtype)
    if ste == "clipped" and torch.is_grad_enabled() and x.requires_grad:
        return torch.ops.groupquant.group_fake_quant_masked(x, *args)[0]
    return torch.ops.groupquant.group_fake_quant(x, *args)


def native_quantize(x: torch.Tensor, spec: GroupSpec) -> GroupQuantized:
    """Codes and shared scales of ``x`` by ``spec`` with the native op (contracted layout)."""
    codes, scale, scale_codes = torch.ops.groupquant.group_quantize(x.detach(), *op_args(spec, x.dtype),
                                                                   code_dtype(spec.fmt))
    keep_codes = scale_codes if spec.scale_mode != "float" else None
    return GroupQuantized(codes, scale, keep_codes, spec.fmt, spec.layout, x.dtype)
