"""NVFP4 quantizers: FP4 E2M1 elements in blocks of 16, UE4M3 block scales, a per-tensor float32
second scale (``g = amax / (448 * 6)``), as NVIDIA's kernels and torchao compute it.

Each gives exactly ``groupquant.fake_quant(x, "nvfp4", dim=dim)`` on the same data (``dim``: 1 for
weights, the layer's feature dim for activations). The single-level variant (block scales alone,
no tensor scale) is ``NVFP4Weight.let(tensor_scale=False)``. The quantizers declare
``block_scheme = "nvfp4"``: a subclass or variant that changes the element format, the scale
format or the block size is refused with an error naming the setting (subclass
``MXFloat4e2m1Weight`` with ``scale_format='ue4m3'`` and ``restrict_scaling_type=RestrictScaling.FP``
for FP4 with E4M3 scales in other blocks).
"""
from __future__ import annotations

from .base import ActQuantizer, FloatQuantizer, QuantizerMixin, WeightQuantizer
from .settings import RestrictScaling, ScalingPerOutput, ScalingSource, ScalingStatsOp

__all__ = ["NVFP4Scaling", "NVFP4Weight", "NVFP4Act"]


class NVFP4Scaling(QuantizerMixin):
    """NVFP4 scaling: groups of 16, UE4M3 scales ``e4m3(clamp((amax / 6) / g, 2^-6, 448))`` from each
    tensor, with the per-tensor float32 scale ``g``; elements FP4 E2M1, rounded to nearest even."""

    block_scheme = "nvfp4"
    scaling_per_output = ScalingPerOutput.GROUP
    group_size = 16
    restrict_scaling_type = RestrictScaling.FP
    scale_format = "ue4m3"
    tensor_scale = True
    scaling_source = ScalingSource.STATS
    scaling_stats_op = ScalingStatsOp.ABS_MAX
    bit_width = 4
    exponent_bit_width = 2
    mantissa_bit_width = 1


class NVFP4Weight(NVFP4Scaling, WeightQuantizer, FloatQuantizer):
    """NVFP4 weights: blocks of 16 along the input features."""


class NVFP4Act(NVFP4Scaling, ActQuantizer, FloatQuantizer):
    """NVFP4 activations (dynamic block and tensor scales from each batch)."""
