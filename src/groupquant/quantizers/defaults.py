"""Per-tensor, per-channel and per-group quantizers with float scales (non-MX defaults).

Weights take their scale from each weight's abs-max (statistics, every call); activations
from running statistics of the batches seen in training (frozen in eval). Integer scales are
float: ``scale = abs_max / qmax`` per tensor / channel / group.
"""
from __future__ import annotations

from .base import ActQuantizer, BiasQuantizer, FloatQuantizer, IntQuantizer, WeightQuantizer
from .settings import RestrictScaling, ScalingPerOutput, ScalingSource

__all__ = [
    "Int8WeightPerTensor", "Int8WeightPerChannel", "Int4WeightPerGroupFloat", "Int8ActPerTensor",
    "Uint8ActPerTensor", "Fp8e4m3WeightPerTensor", "Fp8e4m3ActPerTensor", "Int16BiasPerTensor",
]


class Int8WeightPerTensor(WeightQuantizer, IntQuantizer):
    """int8 weights in [-127, 127], one float scale (abs-max / 127)."""

    bit_width = 8
    scaling_per_output = ScalingPerOutput.TENSOR
    restrict_scaling_type = RestrictScaling.FP


class Int8WeightPerChannel(WeightQuantizer, IntQuantizer):
    """int8 weights in [-127, 127], one float scale per output channel."""

    bit_width = 8
    scaling_per_output = ScalingPerOutput.CHANNEL
    restrict_scaling_type = RestrictScaling.FP


class Int4WeightPerGroupFloat(WeightQuantizer, IntQuantizer):
    """int4 weights in [-7, 7], one float scale per group of 128 input features."""

    bit_width = 4
    scaling_per_output = ScalingPerOutput.GROUP
    group_size = 128
    restrict_scaling_type = RestrictScaling.FP


class Int8ActPerTensor(ActQuantizer, IntQuantizer):
    """int8 activations in [-128, 127], one float scale from running abs-max statistics."""

    bit_width = 8
    narrow_range = False
    scaling_source = ScalingSource.RUNNING_STATS


class Uint8ActPerTensor(ActQuantizer, IntQuantizer):
    """uint8 activations in [0, 255] (after a ReLU), one float scale from running statistics."""

    bit_width = 8
    signed = False
    narrow_range = False
    scaling_source = ScalingSource.RUNNING_STATS


class Fp8e4m3WeightPerTensor(WeightQuantizer, FloatQuantizer):
    """OCP FP8 E4M3 weights, one float scale (abs-max / 448)."""

    bit_width = 8
    exponent_bit_width = 4
    mantissa_bit_width = 3


class Fp8e4m3ActPerTensor(ActQuantizer, FloatQuantizer):
    """OCP FP8 E4M3 activations, one float scale from running abs-max statistics."""

    bit_width = 8
    exponent_bit_width = 4
    mantissa_bit_width = 3
    scaling_source = ScalingSource.RUNNING_STATS


class Int16BiasPerTensor(BiasQuantizer, IntQuantizer):
    """int16 bias, one float scale from its abs-max."""

    bit_width = 16
    narrow_range = True
