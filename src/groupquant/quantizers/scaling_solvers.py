"""Solvers that turn scaling settings into the core's granularity, scale rule and scale module.

``granularity`` resolves ``scaling_per_output`` (TENSOR / CHANNEL / GROUP), mapping the older
boolean ``scaling_per_output_channel`` onto it with a DeprecationWarning. ``scale_impl`` picks
the scale source: None for abs-max statistics (the quant module then calls
:func:`groupquant.fake_quant` directly), else a core scale module.
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence

from torch import nn

from ..core import LearnedScale, RunningStatsScale, ScaleGranularity, ScalingStats, StatsScale
from ..formats import ElementFormat
from ..inject import ConfigError
from .checks import check_int, check_number, check_optional_int
from .settings import RestrictScaling, ScaleRounding, ScalingPerOutput, ScalingSource, ScalingStatsOp, coerce

__all__ = ["granularity", "scale_granularity", "scale_rule", "scaling_stats", "scale_impl"]


def granularity(scaling_per_output: object, group_size: Optional[int],
                scaling_per_output_channel: Optional[bool] = None) -> ScalingPerOutput:
    """The resolved scale sharing; checks ``group_size`` against it.

    ``scaling_per_output_channel=True/False`` (deprecated) wins when given, as CHANNEL/TENSOR.
    """
    if scaling_per_output_channel is not None:
        if not isinstance(scaling_per_output_channel, bool):
            raise ConfigError("scaling_per_output_channel",
                              f"must be True, False or None, got {scaling_per_output_channel!r}")
        warnings.warn("scaling_per_output_channel is deprecated: use scaling_per_output=ScalingPerOutput.CHANNEL "
                      "(True) or ScalingPerOutput.TENSOR (False)", DeprecationWarning, stacklevel=2)
        resolved = ScalingPerOutput.CHANNEL if scaling_per_output_channel else ScalingPerOutput.TENSOR
    else:
        resolved = coerce("scaling_per_output", scaling_per_output, ScalingPerOutput)
    if resolved is ScalingPerOutput.GROUP:
        if group_size is None:
            raise ConfigError("group_size", "scaling_per_output=GROUP needs a group_size (e.g. 32)")
        check_int("group_size", group_size, 1)
    elif group_size is not None:
        raise ConfigError("group_size", f"group_size={group_size!r} is set but scaling is per "
                                        f"{resolved.value}: set scaling_per_output=ScalingPerOutput.GROUP "
                                        "to scale per group, or group_size=None")
    return resolved


def scale_granularity(granularity: ScalingPerOutput, group_size: Optional[int], group_dim: Optional[int],
                      channel_dim: Optional[int]) -> ScaleGranularity:
    """The core granularity. A ``None`` dim (activations) means the last dim unless the layer
    sets it (the linear feature dim, or the convolution channel dim 1)."""
    gdim = check_optional_int("group_dim", group_dim)
    cdim = check_optional_int("channel_dim", channel_dim)
    if granularity is ScalingPerOutput.GROUP:
        return ScaleGranularity("group", -1 if gdim is None else gdim, group_size)
    if granularity is ScalingPerOutput.CHANNEL:
        return ScaleGranularity("channel", -1 if cdim is None else cdim)
    return ScaleGranularity("tensor")


def scale_rule(restrict_scaling_type: object, scale_rounding: object, scaling_source: object,
               scaling_stats_op: object) -> str:
    """One line saying how a scale is obtained (shown by ``describe``)."""
    restrict = coerce("restrict_scaling_type", restrict_scaling_type, RestrictScaling)
    mode = coerce("scale_rounding", scale_rounding, ScaleRounding)
    source = coerce("scaling_source", scaling_source, ScalingSource)
    stat = coerce("scaling_stats_op", scaling_stats_op, ScalingStatsOp).value
    if restrict is RestrictScaling.FP:
        rule = f"{stat} / max_normal"
    else:
        rule = {ScaleRounding.FLOOR: f"2^(floor(log2({stat})) - emax)",
                ScaleRounding.CEIL: f"2^(ceil(log2({stat})) - emax)",
                ScaleRounding.EVEN: f"2^(floor(log2(round_mantissa({stat}))) - emax)",
                ScaleRounding.RCEIL: f"2^ceil(log2({stat} / max_normal))"}[mode]
    kind = "float" if restrict is RestrictScaling.FP else "power of two (E8M0)"
    where = {ScalingSource.STATS: "from each tensor", ScalingSource.RUNNING_STATS: "running statistics",
             ScalingSource.LEARNED: "learned, initialised as"}[source]
    return f"{kind}: {where} {rule}"


def scaling_stats(scaling_stats_op: object, percentile: object) -> ScalingStats:
    """The statistic scales are computed from."""
    op = coerce("scaling_stats_op", scaling_stats_op, ScalingStatsOp)
    if op is ScalingStatsOp.PERCENTILE:
        return ScalingStats(op.value, check_number("percentile", percentile, 0.0, 100.0))
    return ScalingStats(op.value)


def _learned_shape(grain: ScaleGranularity, tensor_shape: Optional[Sequence[int]]) -> Optional[tuple]:
    """Shape of a learned scale: () per tensor, from the tensor's shape where the layer gives it
    (weights), else None (the parameter is created on the first call)."""
    if grain.kind == "tensor":
        return ()
    if tensor_shape is None:
        return None
    try:
        return grain.scale_shape(tensor_shape)
    except ValueError as err:
        raise ConfigError("group_dim" if grain.is_group else "channel_dim", str(err)) from None


def scale_impl(element_format: ElementFormat, scale_granularity: ScaleGranularity, scaling_stats: ScalingStats,
               restrict_scaling_type: object, scale_rounding: object, scaling_source: object,
               running_momentum: object, scaling_min_val: object,
               tensor_shape: Optional[Sequence[int]] = None) -> Optional[nn.Module]:
    """The scale module, or None where abs-max statistics of each tensor give the scale."""
    restrict = coerce("restrict_scaling_type", restrict_scaling_type, RestrictScaling).value
    mode = coerce("scale_rounding", scale_rounding, ScaleRounding).value
    source = coerce("scaling_source", scaling_source, ScalingSource)
    grain = scale_granularity
    if scaling_stats.op == "percentile" and grain.is_group:
        raise ConfigError("scaling_stats_op", "PERCENTILE statistics are per tensor or per channel; "
                                              "group scales use ABS_MAX")
    if source is ScalingSource.STATS:
        if scaling_stats.op == "abs_max":
            return None
        return StatsScale(scaling_stats, element_format, grain, restrict, mode)
    if source is ScalingSource.RUNNING_STATS:
        if grain.kind != "tensor":
            raise ConfigError("scaling_per_output", f"RUNNING_STATS scales are per tensor, got per {grain.kind}")
        momentum = check_number("running_momentum", running_momentum, 0.0, 1.0)
        return RunningStatsScale(scaling_stats, element_format, restrict, mode, momentum)
    min_val = check_number("scaling_min_val", scaling_min_val, 0.0, float("inf"))
    return LearnedScale(scaling_stats, element_format, grain, _learned_shape(grain, tensor_shape),
                        restrict, mode, min_val)
