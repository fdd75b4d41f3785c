"""Quantizer bases: the settings every quantizer declares, and the solvers that resolve them.

A quantizer is an :class:`groupquant.inject.Injector` subclass: plain class attributes are
settings, ``value(...)`` attributes are solvers. Subclass to change a setting, or derive a new
quantizer with ``Q.let(setting=...)`` (unknown names fail with a did-you-mean). Reading
``Q.tensor_quant`` builds the quant module (this is when misconfiguration is reported, with the
setting named); ``groupquant.describe(Q)`` shows every resolved setting and derived value.

Roles: :class:`WeightQuantizer` groups along dim 1 (input features / channels of a weight
``[O, I, ...]``) and scales per channel along dim 0; :class:`ActQuantizer` leaves the dims to
the layer (last dim for linear layers, channel dim 1 for convolutions); :class:`BiasQuantizer`
uses dim 0 of the 1-D bias.
"""
from __future__ import annotations

from ..inject import Injector, value
from . import format_solvers as fs
from . import module_solvers as ms
from . import scaling_solvers as ss
from .settings import (FloatToIntRounding, NanInfRule, RestrictScaling, ScaleRounding, ScalingPerOutput,
                       ScalingSource, ScalingStatsOp, SteMode)

__all__ = [
    "QuantizerBase", "IntQuantizer", "FloatQuantizer", "WeightQuantizer", "ActQuantizer", "BiasQuantizer",
    "MXScaling", "LearnedScaling",
]


class QuantizerBase(Injector):
    """Settings shared by integer and float quantizers (defaults: per-tensor float scale from
    abs-max statistics, round to nearest even, identity straight-through gradient)."""

    signed = True
    scaling_per_output = ScalingPerOutput.TENSOR
    scaling_per_output_channel = None  # deprecated boolean: True -> CHANNEL, False -> TENSOR
    group_size = None
    group_dim = None
    channel_dim = None
    restrict_scaling_type = RestrictScaling.FP
    scale_rounding = ScaleRounding.FLOOR
    float_to_int_rounding = FloatToIntRounding.EVEN
    scaling_source = ScalingSource.STATS
    scaling_stats_op = ScalingStatsOp.ABS_MAX
    percentile = 99.999
    running_momentum = 0.1
    scaling_min_val = 2.0 ** -32
    ste = SteMode.IDENTITY
    tensor_shape = None  # set by the layer for weights (learned scales need it)

    granularity = value(ss.granularity)
    scale_rule = value(ss.scale_rule)
    scale_granularity = value(ss.scale_granularity)
    scaling_stats = value(ss.scaling_stats)
    scale_impl = value(ss.scale_impl)
    _derived_checked = value(ms.derived_values_untouched)
    tensor_quant = value(ms.tensor_quant)


class IntQuantizer(QuantizerBase):
    """Integer elements (two's complement, symmetric narrow range by default): value = int * scale."""

    bit_width = 8
    narrow_range = True

    element_format = value(fs.int_element_format)
    format_name = value(fs.format_name)
    qmin = value(fs.qmin)
    qmax = value(fs.qmax)
    max_normal = value(fs.max_normal)
    emax = value(fs.emax)
    min_subnormal = value(fs.min_subnormal)


class FloatQuantizer(QuantizerBase):
    """Minifloat elements: sign, ``exponent_bit_width``, ``mantissa_bit_width`` (they must add up
    to ``bit_width``), NaN/Inf codes by ``nan_inf_rule`` (OCP: derived from the widths)."""

    bit_width = 8
    exponent_bit_width = 4
    mantissa_bit_width = 3
    nan_inf_rule = NanInfRule.OCP
    exponent_bias = None  # None: the standard bias 2**(E-1) - 1 (+1 for FNUZ)

    element_format = value(fs.float_element_format)
    format_name = value(fs.format_name)
    bias = value(fs.exponent_bias_of)
    special_values = value(fs.resolved_nan_inf_rule)
    emax = value(fs.emax)
    max_normal = value(fs.max_normal)
    min_normal = value(fs.min_normal)
    min_subnormal = value(fs.min_subnormal)


class WeightQuantizer(Injector):
    """Role: weights ``[O, I, ...]``: groups along the input dim 1, channels along dim 0."""

    group_dim = 1
    channel_dim = 0


class ActQuantizer(Injector):
    """Role: activations: dims None, filled in by the layer (last dim for linear, 1 for conv)."""

    group_dim = None
    channel_dim = None


class BiasQuantizer(Injector):
    """Role: a 1-D bias: groups and channels along dim 0."""

    group_dim = 0
    channel_dim = 0


class MXScaling(Injector):
    """OCP MX v1.0 scaling: groups of 32, E8M0 scales ``2**(floor(log2 amax) - emax)`` computed
    from each tensor, elements rounded to nearest even."""

    scaling_per_output = ScalingPerOutput.GROUP
    group_size = 32
    restrict_scaling_type = RestrictScaling.POWER_OF_TWO
    scale_rounding = ScaleRounding.FLOOR
    scaling_source = ScalingSource.STATS


class LearnedScaling(Injector):
    """Mix in (first) to learn the scale: a parameter initialised from abs-max statistics,
    trained with the clipped straight-through estimator (LSQ-style gradient)."""

    scaling_source = ScalingSource.LEARNED
    ste = SteMode.CLIPPED
