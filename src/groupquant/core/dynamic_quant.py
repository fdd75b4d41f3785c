"""Quantize-dequantize with abs-max scales computed from the tensor itself, on every call.

This is the MX path (OCP MX v1.0: per-group E8M0 scales from the group's abs-max) and the
statistics path of per-tensor and per-channel quantizers. Every granularity is expressed as a
call of :func:`groupquant.fake_quant` (groups along one dim; channel and tensor granularity
as a reshape into one group per channel / one group in all), so the native kernel behind that
function runs here, and the output equals ``fake_quant`` bit for bit.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import nn

from ..formats import ElementFormat
from ..ops import fake_quant, group_scale
from .granularity import ScaleGranularity
from .quant_output import QuantOutput
from .restrict import scale_mode
from .stats import ScalingStats
from .ste import STE_MODES

__all__ = ["DynamicQuant"]

_ABS_MAX = ScalingStats("abs_max")


def _as_groups(x: torch.Tensor, granularity: ScaleGranularity) -> Tuple[torch.Tensor, int, int]:
    """``x`` reshaped so that one group along a dim is one scale: (tensor, block_size, dim).

    block_size 0 means the whole dim (one group). Group granularity keeps ``x`` as is.
    """
    if granularity.kind == "group":
        return x, granularity.group_size, granularity.dim
    if granularity.kind == "tensor":
        return x.reshape(1, -1), 0, 1
    d = granularity.channel_dim(x.ndim)
    if d == 0:
        return x.reshape(x.shape[0], -1), 0, 1
    moved = x.movedim(d, -1)
    return moved.reshape(-1, x.shape[d]), 0, 0


def _from_groups(y: torch.Tensor, x: torch.Tensor, granularity: ScaleGranularity) -> torch.Tensor:
    """Inverse of :func:`_as_groups` for an output ``y`` of input ``x``."""
    if granularity.kind == "group":
        return y
    if granularity.kind == "channel":
        d = granularity.channel_dim(x.ndim)
        if d != 0:
            return y.reshape(x.movedim(d, -1).shape).movedim(-1, d)
    return y.reshape(x.shape)


class DynamicQuant(nn.Module):
    """Abs-max scaled quantize-dequantize through :func:`groupquant.fake_quant`.

    Args:
        fmt: element format.
        granularity: tensor / channel / group scale sharing.
        restrict: ``'power_of_two'`` (E8M0 scales by rule ``mode``) or ``'fp'`` (amax / max_normal).
        mode: power-of-two rule: ``'floor'`` (OCP), ``'ceil'``, ``'even'``, ``'rceil'``.
        rounding: element rounding: ``'even'``, ``'nearest'``, ``'floor'``, ``'stochastic'``.
        ste: gradient: ``'identity'`` or ``'clipped'`` (zero where an element saturated).
    """

    def __init__(self, fmt: ElementFormat, granularity: ScaleGranularity, restrict: str = "power_of_two",
                 mode: str = "floor", rounding: str = "even", ste: str = "identity") -> None:
        super().__init__()
        if ste not in STE_MODES:
            raise ValueError(f"ste must be one of {STE_MODES}, got {ste!r}")
        self.fmt = fmt
        self.granularity = granularity
        self.scale_mode = scale_mode(restrict, mode)
        self.rounding = rounding
        self.ste = ste

    def extra_repr(self) -> str:
        return (f"fmt={self.fmt.name}, granularity={self.granularity.kind}, dim={self.granularity.dim}, "
                f"group_size={self.granularity.group_size}, scale_mode={self.scale_mode}, "
                f"rounding={self.rounding}, ste={self.ste}")

    def forward(self, x: torch.Tensor) -> QuantOutput:
        """Quantize-dequantize ``x``; values in the granularity's view, scales beside them."""
        g = self.granularity
        grouped, block, dim = _as_groups(x, g)
        y = fake_quant(grouped, self.fmt, block, dim, self.rounding, self.scale_mode, ste=self.ste)
        y = _from_groups(y, x, g)
        scale, _ = group_scale(_ABS_MAX(x, g), self.fmt, self.scale_mode, x.dtype)
        layout = g.layout(x.shape) if g.is_group else None
        value = layout.contract(y) if layout is not None else y
        return QuantOutput(value, scale, g, layout)
