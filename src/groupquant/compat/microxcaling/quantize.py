"""microxcaling's quantizers on groupquant's ops (what each is: ``docs/compat-microxcaling.md``)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from torch import Tensor

from ...elementwise.unary import cast
from ...ops.api import fake_quant
from ...ops.precision import round_to_precision
from ._torch import native_torch
from .mapping import elem_format as to_format, element_precision, group_size, mx_rounding, scale_format, rounding_kit
from .specs import Specs

__all__ = ["quantize_elemwise_op", "quantize_mx_op", "quantize_bfloat"]


def quantize_elemwise_op(x: Tensor, mx_specs: Specs, round: Optional[str] = None) -> Tensor:
    """``x`` rounded to the bfloat/fp precision of ``mx_specs`` with ``round`` (None: ``mx_specs['round']``)."""
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


def quantize_mx_op(A: Tensor, mx_specs: Mapping[str, Any], elem_format: Any = None, block_size: Optional[int] = None,
                   axes: Union[int, Sequence[int], None] = None, round: str = "nearest",
                   expand_and_reshape: bool = False, shared_exp_from_float_log2: Optional[bool] = None) -> Tensor:
    """microxcaling's ``quantize_mx_op``: :func:`groupquant.fake_quant` of ``A`` along the one dim in ``axes``
    with the settings of ``mx_specs`` where an argument is None (``expand_and_reshape`` is ignored, as there)."""
    fmt = to_format(elem_format, "elem_format")
    if fmt is None:
        return A
    axis = _one_axis(axes, A.ndim)
    size = group_size(mx_specs, block_size)
    float_log2 = bool(mx_specs.get("shared_exp_from_float_log2", False) if shared_exp_from_float_log2 is None
                      else shared_exp_from_float_log2)
    sf = scale_format(mx_specs.get("scale_bits", 0), bool(mx_specs.get("mx_flush_fp32_subnorms", False)), float_log2)
    with native_torch():
        return fake_quant(A, fmt, block_size=size or None, dim=axis, rounding=mx_rounding(round, "round_mx_*"),
                          scale_mode="float_log2" if float_log2 else "floor", scale_format=sf)


def quantize_bfloat(x: Tensor, mx_specs: Specs, round: Optional[str] = None) -> Tensor:
    """``x`` rounded to the bfloat/fp precision of ``mx_specs``, its gradient with the backward specs."""
    if mx_specs is None:
        return x
    return cast(x, precision=rounding_kit(mx_specs, round)).to(x.dtype)
