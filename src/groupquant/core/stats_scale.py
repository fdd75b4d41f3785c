"""A scale computed from the current tensor's statistic on every call (e.g. a percentile)."""
from __future__ import annotations

import torch
from torch import nn

from .quant_spec import QuantSpec
from .restrict import scale_from_stat
from .stats import ScalingStats

__all__ = ["StatsScale"]


class StatsScale(nn.Module):
    """``forward(x)`` -> float32 scale of ``x`` (granularity's scale shape), no gradient, by ``spec``
    (statistic, format, granularity, restriction and power-of-two rule)."""

    def __init__(self, spec: QuantSpec) -> None:
        super().__init__()
        self.spec = spec
        self.stats = ScalingStats(spec.stats_op, spec.percentile)
        self.granularity = spec.scale_granularity

    def extra_repr(self) -> str:
        return f"stats={self.stats.op}, restrict={self.spec.restrict}, mode={self.spec.scale_rounding}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale_from_stat(self.stats(x, self.granularity), self.spec.fmt, self.spec.scale_rule)
