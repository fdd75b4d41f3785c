"""Minifloat quantizers under the names Brevitas users import (after renaming the module path).

Format mixins set the widths (``Fp8e4m3Mixin``: 8 bits, E4M3; ``Fp6e3m2Mixin``, ``Fp6e2m3Mixin``,
``Fp4e2m1Mixin``, ``Fp8e5m2Mixin``) and the FNUZ ones the FNUZ NaN rule (bias + 1, one NaN code,
no -0). ``FpOCP*`` / ``FpFNUZ*`` are per-tensor or per-channel float-scaled quantizers for any
widths (E4M3 unless a mixin says otherwise); ``Fp8e4m3OCPWeightPerTensorFloat`` and friends are
the compositions Brevitas predefines. Where groupquant differs: its activation quantizers take the
scale from running statistics (per tensor) or from each tensor (per channel), not from a
parameter initialised over 300 calibration steps; all are saturating unless ``saturating=False``.
"""
from __future__ import annotations

from .base import ActQuantizer, FloatQuantizer, QuantizerMixin, WeightQuantizer
from .format_mixins import Fp4e2m1Mixin, Fp6e2m3Mixin, Fp6e3m2Mixin, Fp8e4m3Mixin, Fp8e5m2Mixin
from .settings import NanInfRule, RestrictScaling, ScalingPerOutput, ScalingSource, ScalingStatsOp

__all__ = [
    "Fp8e4m3Mixin", "Fp8e5m2Mixin", "Fp6e3m2Mixin", "Fp6e2m3Mixin", "Fp4e2m1Mixin", "Fp8e4m3FNUZMixin",
    "Fp8e5m2FNUZMixin", "FpOCPMixin", "FpFNUZMixin",
    "FpOCPWeightPerTensorFloat", "FpOCPWeightPerChannelFloat", "FpOCPActPerTensorFloat", "FpOCPActPerChannelFloat2d",
    "FpFNUZWeightPerTensorFloat", "FpFNUZWeightPerChannelFloat", "FpFNUZActPerTensorFloat",
    "Fp8e4m3OCPWeightPerTensorFloat", "Fp8e4m3OCPWeightPerChannelFloat", "Fp8e4m3OCPActPerTensorFloat",
    "Fp8e5m2OCPWeightPerTensorFloat", "Fp8e5m2OCPWeightPerChannelFloat", "Fp8e5m2OCPActPerTensorFloat",
    "Fp8e4m3FNUZWeightPerTensorFloat", "Fp8e4m3FNUZWeightPerChannelFloat", "Fp8e4m3FNUZActPerTensorFloat",
    "Fp8e5m2FNUZWeightPerTensorFloat", "Fp8e5m2FNUZWeightPerChannelFloat", "Fp8e5m2FNUZActPerTensorFloat",
]


class FpOCPMixin(QuantizerMixin):
    """OCP NaN/Inf codes derived from the widths (e4m3: NaN only; e5m2: IEEE; 6/4 bits: none)."""

    nan_inf_rule = NanInfRule.OCP
    saturating = True


class FpFNUZMixin(QuantizerMixin):
    """FNUZ: one NaN code (the negative-zero pattern), no Inf, no -0, exponent bias + 1."""

    nan_inf_rule = NanInfRule.FNUZ
    exponent_bias = None


class Fp8e4m3FNUZMixin(FpFNUZMixin, Fp8e4m3Mixin):
    """FP8 E4M3 FNUZ (bias 8, max 240)."""


class Fp8e5m2FNUZMixin(FpFNUZMixin, Fp8e5m2Mixin):
    """FP8 E5M2 FNUZ (bias 16, max 57344)."""


class _PerTensorWeight(WeightQuantizer, FloatQuantizer):
    scaling_per_output = ScalingPerOutput.TENSOR
    restrict_scaling_type = RestrictScaling.FP


class _PerChannelWeight(WeightQuantizer, FloatQuantizer):
    scaling_per_output = ScalingPerOutput.CHANNEL
    restrict_scaling_type = RestrictScaling.FP


class _PerTensorAct(ActQuantizer, FloatQuantizer):
    scaling_per_output = ScalingPerOutput.TENSOR
    restrict_scaling_type = RestrictScaling.FP
    scaling_source = ScalingSource.RUNNING_STATS
    scaling_stats_op = ScalingStatsOp.PERCENTILE


class FpOCPWeightPerTensorFloat(FpOCPMixin, _PerTensorWeight):
    """OCP minifloat weights (E4M3 unless a mixin sets the widths), one float scale (abs-max / max normal)."""


class FpOCPWeightPerChannelFloat(FpOCPMixin, _PerChannelWeight):
    """OCP minifloat weights, one float scale per output channel."""


class FpOCPActPerTensorFloat(FpOCPMixin, _PerTensorAct):
    """OCP minifloat activations, one float scale from running 99.999th-percentile statistics."""


class FpOCPActPerChannelFloat2d(FpOCPMixin, ActQuantizer, FloatQuantizer):
    """OCP minifloat activations of NCHW maps, one float scale per channel (dim 1) from each tensor's abs-max."""

    scaling_per_output = ScalingPerOutput.CHANNEL
    restrict_scaling_type = RestrictScaling.FP
    channel_dim = 1


class FpFNUZWeightPerTensorFloat(FpFNUZMixin, _PerTensorWeight):
    """FNUZ minifloat weights, one float scale."""


class FpFNUZWeightPerChannelFloat(FpFNUZMixin, _PerChannelWeight):
    """FNUZ minifloat weights, one float scale per output channel."""


class FpFNUZActPerTensorFloat(FpFNUZMixin, _PerTensorAct):
    """FNUZ minifloat activations, one float scale from running percentile statistics."""


class Fp8e4m3OCPWeightPerTensorFloat(Fp8e4m3Mixin, FpOCPWeightPerTensorFloat):
    """OCP FP8 E4M3 weights, per-tensor float scale."""


class Fp8e4m3OCPWeightPerChannelFloat(Fp8e4m3Mixin, FpOCPWeightPerChannelFloat):
    """OCP FP8 E4M3 weights, per-channel float scales."""


class Fp8e4m3OCPActPerTensorFloat(Fp8e4m3Mixin, FpOCPActPerTensorFloat):
    """OCP FP8 E4M3 activations, per-tensor float scale."""


class Fp8e5m2OCPWeightPerTensorFloat(Fp8e5m2Mixin, FpOCPWeightPerTensorFloat):
    """OCP FP8 E5M2 weights, per-tensor float scale."""


class Fp8e5m2OCPWeightPerChannelFloat(Fp8e5m2Mixin, FpOCPWeightPerChannelFloat):
    """OCP FP8 E5M2 weights, per-channel float scales."""


class Fp8e5m2OCPActPerTensorFloat(Fp8e5m2Mixin, FpOCPActPerTensorFloat):
    """OCP FP8 E5M2 activations, per-tensor float scale."""


class Fp8e4m3FNUZWeightPerTensorFloat(Fp8e4m3FNUZMixin, _PerTensorWeight):
    """FP8 E4M3 FNUZ weights, per-tensor float scale."""


class Fp8e4m3FNUZWeightPerChannelFloat(Fp8e4m3FNUZMixin, _PerChannelWeight):
    """FP8 E4M3 FNUZ weights, per-channel float scales."""


class Fp8e4m3FNUZActPerTensorFloat(Fp8e4m3FNUZMixin, _PerTensorAct):
    """FP8 E4M3 FNUZ activations, per-tensor float scale."""


class Fp8e5m2FNUZWeightPerTensorFloat(Fp8e5m2FNUZMixin, _PerTensorWeight):
    """FP8 E5M2 FNUZ weights, per-tensor float scale."""


class Fp8e5m2FNUZWeightPerChannelFloat(Fp8e5m2FNUZMixin, _PerChannelWeight):
    """FP8 E5M2 FNUZ weights, per-channel float scales."""


class Fp8e5m2FNUZActPerTensorFloat(Fp8e5m2FNUZMixin, _PerTensorAct):
    """FP8 E5M2 FNUZ activations, per-tensor float scale."""
