"""A power-of-two scale chosen by a small search minimizing the squared quantization error.

For each scale (group, channel or tensor, by the granularity) the OCP floor rule gives the
exponent ``e0 = floor(log2(amax)) - emax``. The search tries every exponent ``e`` in the window
``e0 - below .. e0 + above`` (default ``e0 - 3 .. e0 + 1``: five candidates) and keeps the one
minimizing ``sum((round_to_format(x / 2**e) * 2**e - x)**2)`` over the elements sharing the scale:

- smaller scales trade saturating the largest elements for finer steps on the rest (worth it
  when a group holds a few outliers and many small values that would round to zero);
- ``e0 + 1`` helps where the floor rule saturates (``amax / 2**e0`` above max normal, e.g. an
  fp4 group whose amax has significand 1.75 or more, or an MXINT8 group near 2**(e+1));
- ties go to the larger scale (more headroom, fewer saturated elements, and it keeps the floor
  rule's choice over a smaller scale of equal error).

Because ``e0`` is a candidate, the chosen scale's error is never larger than the floor rule's.
The rules of :func:`groupquant.ops.group_scale` hold: each candidate is clamped to E8M0's
[-127, 127] and to the input dtype's cap (:func:`groupquant.ops.shared_scale.exponent_cap`); the
window sits around the unclamped ``e0``, so a group far below ``2**-127`` (whose candidates all
clamp) gets ``2**-127`` as with the floor rule; an all-zero group gets ``2**-127`` too (every
candidate has zero error there; the floor rule's value is kept); a group holding NaN or Inf
gets a NaN scale. Padding (a dim that is not a multiple of
the group size) is zeros, which add no error at any scale. Element rounding is the format
core's :func:`groupquant.ops.round_to_format`; the error is summed in float64 (the differences
and squares of float32 values are exact there), so near-ties are not decided by float32 noise.

Cost: one quantize-dequantize pass per candidate (vectorized over all groups; the only Python
loop is over the few candidates), plus a float64 error tensor of ``x``'s size per pass.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import nn

from ..formats import E8M0, ElementFormat
from ..ops import ROUNDING_MODES, round_to_format
from ..ops.bits import exp2i, floor_log2
from ..ops.shared_scale import exponent_cap
from .granularity import ScaleGranularity

__all__ = ["MSE_ROUNDING_MODES", "MSEScale", "mse_scale"]

#: Element roundings the search supports (stochastic rounding has no fixed error to minimize).
MSE_ROUNDING_MODES = tuple(mode for mode in ROUNDING_MODES if mode != "stochastic")


def _check_window(below: int, above: int) -> None:
    """``below`` / ``above`` must be non-negative ints (ValueError naming the setting)."""
    for name, given in (("below", below), ("above", above)):
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            raise ValueError(f"{name} (binades searched {name} the floor rule's exponent) must be a "
                             f"non-negative int, got {given!r}")


def _check_args(fmt: ElementFormat, granularity: ScaleGranularity, rounding: str) -> None:
    """Type and value checks shared by :func:`mse_scale` and :class:`MSEScale`."""
    if not isinstance(fmt, ElementFormat):
        raise TypeError(f"fmt must be an element format (groupquant.formats.get_format(...)), got {fmt!r}")
    if not isinstance(granularity, ScaleGranularity):
        raise TypeError(f"granularity must be a ScaleGranularity, got {granularity!r}")
    if rounding not in MSE_ROUNDING_MODES:
        raise ValueError(f"rounding must be one of {MSE_ROUNDING_MODES} for an MSE scale search, got {rounding!r}")


def _abs_max(xv: torch.Tensor, dims: Tuple[int, ...]) -> torch.Tensor:
    """``|xv|``'s maximum over ``dims`` (keepdim); NaN anywhere gives NaN."""
    return xv.abs().amax(dim=dims, keepdim=True)


def _squared_error(xv: torch.Tensor, exponent: torch.Tensor, fmt: ElementFormat, rounding: str,
                   dims: Tuple[int, ...]) -> torch.Tensor:
    """``sum((round_to_format(xv / 2**e) * 2**e - xv)**2)`` over ``dims`` (keepdim), float64."""
    scale = exp2i(exponent)
    q = round_to_format(xv / scale, fmt, rounding) * scale
    diff = q.double() - xv.double()
    return (diff * diff).sum(dim=dims, keepdim=True)


@torch.no_grad()
def mse_scale(x: torch.Tensor, fmt: ElementFormat, granularity: ScaleGranularity, below: int = 3,
              above: int = 1, rounding: str = "even") -> torch.Tensor:
    """The power-of-two scale of each group / channel / tensor of ``x`` with the least squared
    error among the exponents ``e0 - below .. e0 + above`` (module doc; ties to the larger).

    Args:
        x: float32, bfloat16 or float16 tensor (searched in float32, as the quantizer rounds it).
        fmt: element format (``groupquant.formats.get_format("fp8_e4m3")``, ``"int8"``, ...).
        granularity: which elements share a scale.
        below, above: the search window, in binades around the floor rule's exponent.
        rounding: element rounding, as the quantizer will round (not ``'stochastic'``).

    Returns:
        float32 scales in ``granularity.scale_shape(x.shape)`` (contracted ``[.., k, 1, ..]`` for
        groups), exact powers of two in [2**-127, 2**127], NaN for a group with NaN or Inf.
    """
    _check_args(fmt, granularity, rounding)
    _check_window(below, above)
    xv = granularity.view(x.detach().float())
    out_shape = granularity.scale_shape(x.shape)
    if xv.numel() == 0:
        return exp2i(torch.full(out_shape, E8M0.min_exponent, dtype=torch.int32, device=x.device))
    dims = granularity.reduce_dims(xv.ndim, x.shape)
    amax = _abs_max(xv, dims)
    finite = torch.isfinite(amax)
    xv = torch.where(finite, xv, torch.zeros_like(xv))  # non-finite groups are searched as zeros, then NaN
    e0 = floor_log2(torch.where(finite, amax, torch.zeros_like(amax))) - fmt.emax  # before the clamp
    low, high = E8M0.min_exponent, exponent_cap(x.dtype, fmt)
    best_e = best_err = None
    for offset in range(above, -below - 1, -1):  # largest first: a later candidate must be strictly better
        e = (e0 + offset).clamp(low, high)
        err = _squared_error(xv, e, fmt, rounding, dims)
        if best_e is None:
            best_e, best_err = e, err
            continue
        better = err < best_err
        best_e, best_err = torch.where(better, e, best_e), torch.where(better, err, best_err)
    best_e = torch.where(amax > 0, best_e, torch.full_like(best_e, E8M0.min_exponent))
    scale = torch.where(finite, exp2i(best_e), torch.full_like(amax, float("nan")))
    return scale.reshape(out_shape)


class MSEScale(nn.Module):
    """``forward(x)`` -> float32 power-of-two scale of ``x`` (granularity's scale shape) chosen by
    :func:`mse_scale`, recomputed on every call, no gradient. A ``scale_impl`` for
    :class:`groupquant.core.ScaledQuant` (use the same ``rounding`` there).

    Args:
        fmt: element format.
        granularity: tensor / channel / group scale sharing.
        below: binades searched below the floor rule's exponent (default 3).
        above: binades searched above it (default 1).
        rounding: element rounding the error is measured with (default ``'even'``).
    """

    def __init__(self, fmt: ElementFormat, granularity: ScaleGranularity, below: int = 3, above: int = 1,
                 rounding: str = "even") -> None:
        super().__init__()
        _check_args(fmt, granularity, rounding)
        _check_window(below, above)
        self.fmt, self.granularity = fmt, granularity
        self.below, self.above, self.rounding = below, above, rounding

    def extra_repr(self) -> str:
        return f"fmt={self.fmt.name}, window=e0-{self.below}..e0+{self.above}, rounding={self.rounding}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mse_scale(x, self.fmt, self.granularity, self.below, self.above, self.rounding)
