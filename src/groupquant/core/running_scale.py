"""A per-tensor scale from running statistics (for activations), like BatchNorm's running mean.

Training: the scale comes from the current batch's statistic, and the running statistic is
updated, ``running = (1 - momentum) * running + momentum * stat`` (the first batch sets it).
Evaluation: the running statistic is used (the current one until a training batch was seen).
The running statistic and the ``initialized`` flag are buffers, saved in the state dict.

Data-parallel training (DDP, FSDP2): the batch statistic folded into the running one is first
reduced across the ranks (:func:`groupquant.core.dist_reduce.reduce_stat`: ``max`` of abs-max
statistics, ``mean`` of the others), so every rank keeps the running statistic of the whole
global batch; the batch's own scale stays each rank's (as BatchNorm under DDP). ``with
groupquant.core.stat_sync(False):`` skips the reduction (each rank keeps its own). The buffers are
read again after an in-place load (``torch.distributed.checkpoint.load`` writes into them).
"""
from __future__ import annotations

import torch
from torch import nn

from .dist_reduce import reduce_stat, reduction_for
from .granularity import ScaleGranularity
from .quant_spec import QuantSpec
from .restrict import scale_from_stat
from .stats import ScalingStats

__all__ = ["RunningStatsScale"]


class RunningStatsScale(nn.Module):
    """``forward(x)`` -> 0-d float32 scale (per-tensor granularity only), no gradient."""

    def __init__(self, spec: QuantSpec) -> None:
        super().__init__()
        momentum = spec.running_momentum
        if not isinstance(momentum, (int, float)) or isinstance(momentum, bool) or not 0.0 < momentum <= 1.0:
            raise ValueError(f"running_momentum must be a number in (0, 1], got {momentum!r}")
        self.spec = spec
        self.stats = ScalingStats(spec.stats_op, spec.percentile)
        self.granularity = ScaleGranularity("tensor")
        self.momentum = float(momentum)
        self.register_buffer("running_stat", torch.zeros(()))
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))
        self._seen = False  # Python mirror of `initialized`: no device sync per call

    def extra_repr(self) -> str:
        return (f"stats={self.stats.op}, restrict={self.spec.restrict}, mode={self.spec.scale_rounding}, "
                f"momentum={self.momentum}")

    @torch.no_grad()
    def _update(self, stat: torch.Tensor) -> None:
        """Fold a finite batch statistic, reduced across data-parallel ranks, into the running one
        (a NaN/Inf statistic is skipped), without synchronising with the device."""
        stat = reduce_stat(stat.to(self.running_stat), reduction_for(self.spec.stats_op))
        finite = torch.isfinite(stat)
        ema = self.running_stat * (1.0 - self.momentum) + stat * self.momentum
        new = torch.where(self.initialized, ema, stat)
        self.running_stat.copy_(torch.where(finite, new, self.running_stat))
        self.initialized.copy_(self.initialized | finite)
        self._seen = True

    def _load_from_state_dict(self, *args, **kwargs):  # type: ignore[override]
        super()._load_from_state_dict(*args, **kwargs)
        self._seen = bool(self.initialized)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._seen and not self.training:  # (buffers written in place, e.g. by dcp.load)
            self._seen = bool(self.initialized)
        if self.training or not self._seen:
            stat = self.stats(x, self.granularity)
            if self.training:
                self._update(stat)
        else:
            stat = self.running_stat
        return scale_from_stat(stat, self.spec.fmt, self.spec.scale_rule)
