"""Quantize-dequantize with a scale from a scale module: ``round_to_format(x / s) * s``.

The scale module (:class:`StatsScale`, :class:`RunningStatsScale`, :class:`LearnedScale`,
:class:`MSEScale`) returns the scale in the granularity's shape (contracted ``[O, k, 1]`` for
groups); the element rounding is :func:`groupquant.ops.round_to_format` (the format core's grid
and saturation) inside :func:`scaled_round`, whose straight-through gradients reach both ``x``
and a learned scale while saving only ``x`` and the scale for backward.
"""
from __future__ import annotations

import torch
from torch import nn

from ..ops import FakeQuantResult
from .quant_spec import QuantSpec
from .scaled_round import scaled_round

__all__ = ["ScaledQuant"]


class ScaledQuant(nn.Module):
    """``forward(x)`` -> :class:`FakeQuantResult`, computed in float32, values cast back to x's dtype."""

    def __init__(self, spec: QuantSpec, scale_impl: nn.Module) -> None:
        super().__init__()
        self.spec = spec
        self.scale_impl = scale_impl

    @property
    def fmt(self):
        return self.spec.fmt

    def extra_repr(self) -> str:
        s = self.spec
        return f"fmt={s.fmt.name}, granularity={s.granularity}, rounding={s.rounding}, ste={s.ste}"

    def forward(self, x: torch.Tensor, contract: bool = True, codes: bool = False) -> FakeQuantResult:
        """Quantize-dequantize ``x``; group values contracted (``contract`` False: x's shape).
        ``codes`` asks for the op's codes: this module's op gives values only (the quant tensor
        reads codes off them)."""
        g = self.spec.scale_granularity
        scale = self.scale_impl(x)
        xv = g.view(x)
        noise = torch.rand(xv.shape, device=xv.device) if self.spec.rounding == "stochastic" else None
        value = scaled_round(xv, scale, self.spec.fmt, self.spec.rounding, self.spec.ste, noise,
                             self.spec.saturating)
        if not g.is_group:
            return FakeQuantResult(value, scale)
        layout = g.layout(x.shape)
        return FakeQuantResult(value, scale, layout) if contract else FakeQuantResult(layout.expand(value), scale)
