"""Quantizer bases: the settings every quantizer declares, and the solvers that resolve them.

A quantizer is an :class:`groupquant.inject.Injector` subclass: plain class attributes are
settings (checked against :mod:`.vocabulary` when the class is defined: a misspelling fails with
a did-you-mean), ``value(...)`` attributes are solvers. Subclass to change a setting, or derive
a variant with ``Q.let(setting=...)`` (named ``Q[setting=...]``). Everything resolves once into
one frozen :class:`groupquant.core.QuantSpec` (:func:`quantizer_spec`, cached per class);
``groupquant.describe(Q)`` shows the settings and derived values.

Roles: :class:`WeightQuantizer`, :class:`ActQuantizer` and :class:`BiasQuantizer` leave the
group and channel dims to the layer (None): each operand is grouped along the dim its layer
reduces over (a weight's input features / channels, an activation's features or channel dim 1,
a bias's only dim). Set ``group_dim`` / ``channel_dim`` to override.
"""
from __future__ import annotations

from ..core import build_tensor_quant
from ..inject import Injector, value
from . import format_solvers as fs
from . import scaling_solvers as ss
from .resolve import quant_spec, quantizer_spec
from .settings import (FloatToIntRounding, NanInfRule, RestrictScaling, ScaleRounding, ScalingPerOutput,
                       ScalingSource, ScalingStatsOp, SteMode)
from .vocabulary import DERIVED, FOREIGN_NAMES, SETTINGS

__all__ = [
    "QuantizerMixin", "QuantizerBase", "IntQuantizer", "FloatQuantizer", "WeightQuantizer", "ActQuantizer",
    "BiasQuantizer", "MXScaling", "LearnedScaling", "quantizer_spec",
]


def _standalone_module(spec):
    """``Q.tensor_quant``: the quant module of the spec, for a tensor used without a layer."""
    return build_tensor_quant(spec)


class QuantizerMixin(Injector):
    """Base of quantizers and their mixins: bodies are checked against the settings vocabulary."""

    __vocabulary__ = frozenset(SETTINGS)
    __derived__ = DERIVED
    __foreign__ = FOREIGN_NAMES


class QuantizerBase(QuantizerMixin):
    """Settings shared by integer and float quantizers (defaults: per-tensor float scale from
    abs-max statistics, round to nearest even, saturating, identity straight-through gradient)."""

    signed = True
    saturating = True
    element_precision = None
    scaling_per_output = ScalingPerOutput.TENSOR
    scaling_per_output_channel = None  # deprecated boolean: True -> CHANNEL, False -> TENSOR
    group_size = None
    group_dim = None
    channel_dim = None
    restrict_scaling_type = RestrictScaling.FP
    scale_rounding = ScaleRounding.FLOOR
    scale_format = None  # None: E8M0 for POWER_OF_TWO, float32 for FP
    tensor_scale = False
    block_scheme = None
    float_to_int_rounding = FloatToIntRounding.EVEN
    scaling_source = ScalingSource.STATS
    scaling_stats_op = ScalingStatsOp.ABS_MAX
    percentile = 99.999
    mse_window = 3
    running_momentum = 0.1
    scaling_min_val = 2.0 ** -32
    ste = SteMode.IDENTITY

    granularity = value(ss.granularity)
    spec = value(quant_spec)
    tensor_quant = value(_standalone_module)


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


class WeightQuantizer(QuantizerMixin):
    """Role: weights ``[O, I, ...]``: groups along the input dim 1 and channels along dim 0, as
    the layer says (the dims stay None here)."""


class ActQuantizer(QuantizerMixin):
    """Role: activations: groups and channels along the layer's feature dim (last dim for linear
    layers, 1 for convolutions)."""


class BiasQuantizer(QuantizerMixin):
    """Role: a 1-D bias: groups and channels along dim 0."""


class MXScaling(QuantizerMixin):
    """OCP MX v1.0 scaling: groups of 32, E8M0 scales ``2**(floor(log2 amax) - emax)`` computed
    from each tensor, elements rounded to nearest even."""

    scaling_per_output = ScalingPerOutput.GROUP
    group_size = 32
    restrict_scaling_type = RestrictScaling.POWER_OF_TWO
    scale_rounding = ScaleRounding.FLOOR
    scaling_source = ScalingSource.STATS


class LearnedScaling(QuantizerMixin):
    """Mix in (first) to learn the scale: a parameter initialised from abs-max statistics,
    trained with the clipped straight-through estimator (LSQ-style gradient)."""

    scaling_source = ScalingSource.LEARNED
    ste = SteMode.CLIPPED
