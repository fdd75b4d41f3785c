"""The native ops from Python: their registration, fake (meta) kernels and calls from a :class:`GroupSpec`.

The one Python owner of the native-op family: the group ops (``group_fake_quant``,
``group_quantize``) and the packed GEMM (``packed_linear``, ``packed_decode``). Their schemas and
CPU/CUDA kernels are registered by the C++ extension (csrc/ops.cpp, csrc/packed_gemm_ops.cpp) once
:func:`groupquant.ops.native.load` has loaded it; :func:`register` (called by ``load``) checks that
the extension's two parameter records have the fields of :class:`~.kernel_params.KernelParams` and
:class:`~.packed_gemm_params.PackedGemmParams`, then adds fake kernels to every op, so
``torch.compile(fullgraph=True)`` traces through them. Which backend serves a device is
:func:`groupquant.ops.native.serves`.

``tensor_scale(x, params) -> g`` is the per-tensor scale of two-level scaling (NVFP4's second
level, as :func:`~.shared_scale.tensor_scale_of` defines it): one reduction and one computation of
a scalar, on x's device (the torch ops of the definition are eleven launches on a GPU).
``group_fake_quant(x, params, want_mask, want_scale, tensor_scale) -> (out, mask, scale)`` is the
one fake-quant op: ``mask`` (the elements that did not saturate) and ``scale`` (per-group float32)
are empty unless asked for. Its autograd is C++ (csrc/autograd.cpp, no Python per call): the
gradient passes straight through, times the mask with ``want_mask`` (the clipped straight-through
estimator); nothing else is saved for backward (1 byte per element at most).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from .codes import code_dtype
from .fake_quant_result import FakeQuantResult
from .kernel_params import check_field_names, field_index, op_params
from .packed_gemm_params import check_packed_field_names, packed_field_names
from .quantized import GroupQuantized
from .op_settings import GroupSpec

__all__ = ["register", "op_params", "native_fake_quant", "native_fake_quant_with_scale", "native_quantize",
           "native_tensor_scale", "OP_NAMES"]

OP_NAMES = ("groupquant::group_fake_quant", "groupquant::group_quantize", "groupquant::packed_linear",
            "groupquant::packed_decode", "groupquant::tensor_scale")
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


def _fake_fake_quant(x, params, want_mask, want_scale, tensor_scale=None):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mask = torch.empty(x.shape if want_mask else (0,), dtype=torch.bool, device=x.device)
    scale = torch.empty(_grouped_shape(x, params, 1) if want_scale else (0,), dtype=torch.float32, device=x.device)
    return out, mask, scale


def _fake_quantize(x, params, code_dtype, tensor_scale=None):
    codes = torch.empty(_grouped_shape(x, params, None), dtype=code_dtype, device=x.device)
    scale_shape = _grouped_shape(x, params, 1)
    scale = torch.empty(scale_shape, dtype=torch.float32, device=x.device)
    return codes, scale, torch.empty(scale_shape, dtype=torch.uint8, device=x.device)


_PACKED_NAMES = packed_field_names()


def _fake_packed_linear(x, data, scale, value_table, scale_table, bias, params):
    """``[M, out_features]`` in x's dtype."""
    n = params[_PACKED_NAMES.index("out_features")]
    return torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)


def _fake_packed_decode(data, scale, value_table, scale_table, params):
    """``[out_features, in_features]`` float32."""
    shape = (params[_PACKED_NAMES.index("out_features")], params[_PACKED_NAMES.index("in_features")])
    return torch.empty(shape, dtype=torch.float32, device=data.device)


def _fake_tensor_scale(x, params):
    """0-d float32 on x's device."""
    return torch.empty((), dtype=torch.float32, device=x.device)


_FAKES = dict(zip(OP_NAMES, (_fake_fake_quant, _fake_quantize, _fake_packed_linear, _fake_packed_decode,
                             _fake_tensor_scale)))


def register() -> None:
    """Check the extension's parameter records and add fake kernels to every native op (once per
    process); their autograd is registered in C++ (csrc/autograd.cpp)."""
    if _registered["done"]:
        return
    check_field_names(torch.ops.groupquant.kernel_param_fields().split(","))
    check_packed_field_names(torch.ops.groupquant.packed_gemm_param_fields().split(","))
    for name, fake in _FAKES.items():
        torch.library.register_fake(name)(fake)
    _registered["done"] = True


# ---- calls -------------------------------------------------------------------------------------

def native_tensor_scale(x: torch.Tensor, spec: GroupSpec, params: Optional[List[int]] = None) -> Optional[torch.Tensor]:
    """The per-tensor scale ``g`` of ``x`` under ``spec`` by the native op (0-d float32 on x's
    device), or None without one; ``params``: ``op_params(spec, x.dtype)`` when already made."""
    if not spec.tensor_scale:
        return None
    return torch.ops.groupquant.tensor_scale(x.detach(), op_params(spec, x.dtype) if params is None else params)


def native_fake_quant(x: torch.Tensor, spec: GroupSpec, ste: str = "identity") -> torch.Tensor:
    """Fake-quantize ``x`` by ``spec`` with the native op; gradient by ``ste`` (identity / clipped)."""
    want_mask = ste == "clipped" and torch.is_grad_enabled() and x.requires_grad
    params = op_params(spec, x.dtype)
    ts = native_tensor_scale(x, spec, params)
    return torch.ops.groupquant.group_fake_quant(x, params, want_mask, False, ts)[0]


def native_fake_quant_with_scale(x: torch.Tensor, spec: GroupSpec, ste: str = "identity") -> FakeQuantResult:
    """:func:`native_fake_quant` plus the float32 scales (``spec.layout.scale_shape``) from the same pass
    (and the per-tensor scale of two-level scaling)."""
    want_mask = ste == "clipped" and torch.is_grad_enabled() and x.requires_grad
    params = op_params(spec, x.dtype)
    ts = native_tensor_scale(x, spec, params)
    out, _mask, scale = torch.ops.groupquant.group_fake_quant(x, params, want_mask, True, ts)
    return FakeQuantResult(out, scale, tensor_scale=ts)


def native_quantize(x: torch.Tensor, spec: GroupSpec) -> GroupQuantized:
    """Codes and shared scales of ``x`` by ``spec`` with the native op (contracted layout)."""
    params = op_params(spec, x.dtype)
    ts = native_tensor_scale(x, spec, params)
    codes, scale, scale_codes = torch.ops.groupquant.group_quantize(x.detach(), params, code_dtype(spec.fmt), ts)
    return GroupQuantized(codes=codes, scale=scale, scale_codes=spec.scale_format.kept_codes(scale_codes), fmt=spec.fmt,
                          layout=spec.layout, dtype=x.dtype, scale_format=spec.scale_format, tensor_scale=ts)
