"""A scale computed from the current tensor's statistic on every call (e.g. a percentile)."""
from __future__ import annotations

import torch
from torch import nn

from ..formats import ElementFormat
from .granularity import ScaleGranularity
from .restrict import scale_from_stat, scale_mode
from .stats import ScalingStats

__all__ = ["StatsScale"]


class StatsScale(nn.Module):
    """``forward(x)`` -> float32 scale of ``x`` (granularity's scale shape), no gradient.

    Args: ``stats`` (abs-max or percentile), element format, granularity, ``restrict``
    (``'fp'`` / ``'power_of_two'``) and the power-of-two rule ``mode``.
    """

    def __init__(self, stats: ScalingStats, fmt: ElementFormat, granularity: ScaleGranularity,
                 restrict: str = "fp", mode: str = "floor") -> None:
        super().__init__()
        scale_mode(restrict, mode)  # validates
        self.stats, self.fmt, self.granularity = stats, fmt, granularity
        self.restrict, self.mode = restrict, mode

    def extra_repr(self) -> str:
        return f"stats={self.stats.op}, restrict={self.restrict}, mode={self.mode}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale_from_stat(self.stats(x, self.granularity), self.fmt, self.restrict, self.mode)
