"""Quantize-dequantize with a scale from a scale module: ``round_to_format(x / s) * s``.

The scale module (:class:`StatsScale`, :class:`RunningStatsScale`, :class:`LearnedScale`)
returns the scale in the granularity's shape (contracted ``[O, k, 1]`` for groups); the
element rounding is :func:`groupquant.ops.round_to_format` (the format core's grid and
saturation) inside :func:`scaled_round`, whose straight-through gradients reach both ``x``
and a learned scale while saving only ``x`` and the scale for backward.
"""
from __future__ import annotations

import torch
from torch import nn

from ..formats import ElementFormat
from ..ops import ROUNDING_MODES
from .granularity import ScaleGranularity
from .quant_output import QuantOutput
from .scaled_round import scaled_round
from .ste import STE_MODES

__all__ = ["ScaledQuant"]


class ScaledQuant(nn.Module):
    """``forward(x)`` -> :class:`QuantOutput`, computed in float32, values cast back to x's dtype.

    Args: element format, granularity, ``scale_impl`` (module: x -> scale), element
    ``rounding`` and ``ste`` (``'identity'`` / ``'clipped'``).
    """

    def __init__(self, fmt: ElementFormat, granularity: ScaleGranularity, scale_impl: nn.Module,
                 rounding: str = "even", ste: str = "identity") -> None:
        super().__init__()
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {rounding!r}")
        if ste not in STE_MODES:
            raise ValueError(f"ste must be one of {STE_MODES}, got {ste!r}")
        self.fmt, self.granularity, self.rounding, self.ste = fmt, granularity, rounding, ste
        self.scale_impl = scale_impl

    def extra_repr(self) -> str:
        g = self.granularity
        return (f"fmt={self.fmt.name}, granularity={g.kind}, dim={g.dim}, group_size={g.group_size}, "
                f"rounding={self.rounding}, ste={self.ste}")

    def forward(self, x: torch.Tensor) -> QuantOutput:
        g = self.granularity
        scale = self.scale_impl(x)
        xv = g.view(x)
        noise = torch.rand(xv.shape, device=xv.device) if self.rounding == "stochastic" else None
        value = scaled_round(xv, scale, self.fmt, self.rounding, self.ste, noise)
        return QuantOutput(value, scale, g, g.layout(x.shape) if g.is_group else None)
