"""Statistics a scale is computed from: abs-max, or a percentile of ``|x|`` (for activations).

The statistic has the granularity's scale shape (see :meth:`ScaleGranularity.scale_shape`), is
float32 and carries no gradient. A NaN anywhere in abs-max's reduction gives NaN (so the scale,
and the whole group, becomes NaN, as the OCP spec's X = NaN rule asks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .granularity import ScaleGranularity

__all__ = ["STATS_OPS", "ScalingStats"]

STATS_OPS = ("abs_max", "percentile")


def _kth_largest_fraction(a: torch.Tensor, q: float) -> torch.Tensor:
    """The ``q``-th percentile (0 < q <= 100) of ``a`` along its last dim, by order statistic."""
    n = a.shape[-1]
    k = min(max(int(math.ceil(q / 100.0 * n)), 1), n)
    return torch.kthvalue(a, k, dim=-1).values


@dataclass(frozen=True)
class ScalingStats:
    """A statistic of ``|x|`` per scale: ``op`` in :data:`STATS_OPS`; ``percentile`` in (0, 100]
    is used by ``op='percentile'`` (tensor and channel granularity only)."""

    op: str = "abs_max"
    percentile: float = 99.999

    def __post_init__(self) -> None:
        if self.op not in STATS_OPS:
            raise ValueError(f"op must be one of {STATS_OPS}, got {self.op!r}")
        if self.op == "percentile" and not (isinstance(self.percentile, (int, float))
                                            and 0.0 < float(self.percentile) <= 100.0):
            raise ValueError(f"percentile must be a number in (0, 100], got {self.percentile!r}")

    def __call__(self, x: torch.Tensor, granularity: ScaleGranularity) -> torch.Tensor:
        """The statistic of ``x`` in ``granularity.scale_shape(x.shape)`` (float32, detached)."""
        a = x.detach().float().abs()
        if self.op == "abs_max":
            viewed = granularity.view(a)
            if granularity.kind == "tensor":
                return viewed.amax() if viewed.numel() else viewed.new_zeros(())
            dims = granularity.reduce_dims(viewed.ndim, x.shape)
            return viewed.amax(dim=dims, keepdim=True)
        if granularity.kind == "tensor":
            return _kth_largest_fraction(a.reshape(-1), float(self.percentile))
        if granularity.kind == "channel":
            d = granularity.channel_dim(x.ndim)
            per_channel = a.movedim(d, 0).reshape(x.shape[d], -1)
            stat = _kth_largest_fraction(per_channel, float(self.percentile))
            return stat.reshape(granularity.scale_shape(x.shape))
        raise ValueError("percentile statistics are per tensor or per channel; group scales use abs_max")
