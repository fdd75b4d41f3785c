"""microxcaling's two quantizers, on groupquant's arithmetic.

- :func:`quantize_elemwise_op` rounds every value on its own to the ``bfloat`` / ``fp`` precision
  of ``mx_specs`` (:func:`groupquant.ops.precision.round_to_precision`); identity when both are 0.
- :func:`quantize_mx_op` quantizes blocks of ``block_size`` along one axis to an MX element format
  (:func:`groupquant.ops.fake_quant`, scale mode ``floor``).

The shared exponent. groupquant takes ``floor(log2(amax))`` exactly from amax's exponent bits, as
OCP MX v1.0 defines it. microxcaling computes ``floor(torch.log2(amax))`` in floating point, which
rounds up to ``k`` for an amax just below ``2**k`` (float32: ``nextafter(2**k, 0)`` for k >= 2),
so such a block gets a scale twice as large (e.g. fp8_e4m3, amax = nextafter(4, 0): OCP 3.5,
microxcaling 4.0). ``mx_specs['shared_exp_from_float_log2'] = True`` (or the argument of the
same name) takes microxcaling's float log2 instead; elements are still rounded exactly (microxcaling
also takes each element's own exponent from a float log2, which matters only for ``floor`` rounding
of a value just below a power of two). ``scale_bits`` and ``mx_flush_fp32_subnorms`` are the scale
format of ``fake_quant`` (:func:`.mapping.scale_format`); with the float-log2 option the block path
below serves them too.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

import torch

from ...elementwise.unary import cast
from ...formats import ElementFormat
from ...ops.api import fake_quant
from ...ops.bits import exp2i, floor_log2
from ...ops.element_round import round_to_format
from ...ops.group_layout import GroupLayout
from ...ops.precision import round_to_precision
from .mapping import element_precision, elem_format as to_format, mx_rounding, rounding_kit, scale_format
from ._torch import native_torch
from .specs import apply_mx_specs, get_backwards_mx_specs

__all__ = ["quantize_elemwise_op", "quantize_mx_op", "quantize_mx_blocks", "quantize_bfloat"]

_FP32_MIN_NORMAL = 2.0 ** -126


def quantize_elemwise_op(x: torch.Tensor, mx_specs: Optional[Mapping[str, Any]],
                         round: Optional[str] = None) -> torch.Tensor:
    """``x`` rounded to the bfloat/fp precision of ``mx_specs`` with ``round`` (default ``round``);
    ``x`` itself when ``mx_specs`` is None or sets neither."""
    if mx_specs is None:
        return x
    precision = element_precision(mx_specs, round, setting="round")
    if precision is None:
        return x
    with native_torch():
        return round_to_precision(x, precision)


def _one_axis(axes: Union[int, Sequence[int], None], ndim: int) -> int:
    """The single axis of ``axes`` (microxcaling's list form), normalized to [0, ndim)."""
    if axes is None:
        raise ValueError("quantize_mx_op needs axes= (the dim that blocks run along)")
    axes = [axes] if isinstance(axes, int) else list(axes)
    if len(axes) != 1:
        raise NotImplementedError(f"quantize_mx_op: blocks along one axis only, got axes={axes}")
    axis = axes[0] + ndim if axes[0] < 0 else axes[0]
    if not 0 <= axis < ndim:
        raise ValueError(f"quantize_mx_op: axes={axes} out of range for a {ndim}-d tensor")
    return axis


def _block_exponent(amax: torch.Tensor, float_log2: bool) -> torch.Tensor:
    """floor(log2(amax)) per block as float32: exact (exponent bits) or from a float log2 in amax's dtype."""
    if float_log2:
        guarded = amax + (amax == 0).to(amax.dtype) * _FP32_MIN_NORMAL
        return torch.floor(torch.log2(guarded)).float()
    e = floor_log2(amax).float()
    e = torch.where(amax == 0, torch.full_like(e, -126.0), e)
    return torch.where(torch.isfinite(amax), e, torch.full_like(e, float("inf")))


def quantize_mx_blocks(x: torch.Tensor, fmt: ElementFormat, block_size: int, axis: int, rounding: str,
                       scale_bits: int = 8, shared_exp_from_float_log2: bool = False,
                       flush_fp32_subnorms: bool = False) -> torch.Tensor:
    """MX fake quantization computed block by block in PyTorch (x's dtype out), on groupquant's
    group layout (:class:`groupquant.ops.group_layout.GroupLayout`).

    Shared exponent ``floor(log2(amax)) - emax`` (exact, or from a float log2), NaN above
    ``2**(scale_bits-1) - 1``, clamped below at its negative; elements by
    :func:`groupquant.ops.round_to_format` (saturating). With ``flush_fp32_subnorms`` a block whose
    amax is below float32's min normal becomes zero. ``block_size`` 0 means the whole axis.
    """
    if not isinstance(scale_bits, int) or scale_bits < 2:
        raise ValueError(f"mx_specs scale_bits must be 0 (8) or an int >= 2, got {scale_bits!r}")
    layout = GroupLayout.build(x.shape, axis, block_size or None)
    blocks = layout.contract(x).float()
    amax = blocks.abs().amax(dim=layout.reduce_dim, keepdim=True)
    e = _block_exponent(amax.to(x.dtype), shared_exp_from_float_log2)
    if flush_fp32_subnorms:
        blocks = blocks * (e > -127).float()
    shared = e - fmt.emax
    limit = 2 ** (scale_bits - 1) - 1
    shared = torch.where(shared > limit, torch.full_like(shared, float("nan")), shared.clamp(min=-limit))
    nan = torch.isnan(shared) | torch.isnan(amax)
    k = torch.where(nan, torch.zeros_like(shared), shared).to(torch.int32)
    noise = torch.rand_like(blocks) if rounding == "stochastic" else None
    elems = round_to_format(blocks * exp2i(-k), fmt, rounding, noise=noise)
    out = torch.where(nan, torch.full_like(elems, float("nan")), elems * exp2i(k))
    return layout.expand(out).to(x.dtype)


def quantize_mx_op(A: torch.Tensor, mx_specs: Mapping[str, Any], elem_format: Any = None,
                   block_size: Optional[int] = None, axes: Union[int, Sequence[int], None] = None,
                   round: str = "nearest", expand_and_reshape: bool = False,
                   shared_exp_from_float_log2: Optional[bool] = None) -> torch.Tensor:
    """MX fake quantization of ``A`` as microxcaling's function of this name (no gradient of its own).

    ``elem_format`` None: ``A`` unchanged. ``block_size`` None: ``mx_specs['block_size']`` (0: the
    whole axis). ``axes``: the one dim blocks run along. ``round``: nearest / even / floor / dither.
    ``shared_exp_from_float_log2`` None: ``mx_specs['shared_exp_from_float_log2']`` (see the module
    notes). ``expand_and_reshape`` is accepted and ignored (as microxcaling does).
    """
    fmt = to_format(elem_format, "elem_format")
    if fmt is None:
        return A
    axis = _one_axis(axes, A.ndim)
    size = mx_specs["block_size"] if block_size is None else block_size
    if mx_specs.get("shared_exp_method", "max") == "none":
        size = 1
    elif mx_specs.get("shared_exp_method", "max") != "max":
        raise ValueError(f"mx_specs shared_exp_method={mx_specs['shared_exp_method']!r}: use 'max' or 'none'")
    rounding = mx_rounding(round, "round_mx_*")
    scale_bits = mx_specs.get("scale_bits", 0) or 8
    float_log2 = (mx_specs.get("shared_exp_from_float_log2", False) if shared_exp_from_float_log2 is None
                  else shared_exp_from_float_log2)
    flush = bool(mx_specs.get("mx_flush_fp32_subnorms", False))
    with native_torch():
        if not float_log2:
            return fake_quant(A, fmt, block_size=size or None, dim=axis, rounding=rounding, scale_mode="floor",
                              scale_format=scale_format(mx_specs.get("scale_bits", 0), flush))
        return quantize_mx_blocks(A, fmt, size, axis, rounding, scale_bits, bool(float_log2), flush)


def quantize_bfloat(x: torch.Tensor, mx_specs: Optional[Mapping[str, Any]], round: Optional[str] = None) -> torch.Tensor:
    """``x`` rounded to the bfloat/fp precision of ``mx_specs``, its gradient too with the backward
    specs (microxcaling's ``quantize_bfloat``; :func:`groupquant.elementwise.cast`); ``x`` when
    ``mx_specs`` is None."""
    if mx_specs is None:
        return x
    specs = apply_mx_specs(mx_specs)
    kit = rounding_kit(specs, round, grad=get_backwards_mx_specs(specs))
    return cast(x, precision=kit).to(x.dtype)
