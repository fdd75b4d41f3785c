"""Resolving a quantizer class into its one frozen :class:`groupquant.core.QuantSpec`, once.

``spec`` is the solver every quantizer declares: it reads each setting once, checks it (a
:class:`groupquant.inject.ConfigError` names the setting at fault) and builds the record.
:func:`quantizer_spec` caches the result per class, so layers, proxies and kernels never walk
the injector graph again.
"""
from __future__ import annotations

import weakref
from typing import Optional

from ..core import QuantSpec
from ..formats import (QUANTIZER_SETTINGS, ElementFormat, FloatFormat, ScaleFormat, ScaleSetupError, SpecialValues,
                       check_scale_setup, get_scale_format, get_scheme, known_schemes)
from ..inject import ConfigError
from ..ops.precision import resolve_precision
from .checks import check_bool, check_int, check_number, check_optional_int
from . import format_solvers as fs
from .format_solvers import DERIVED_FORMAT_VALUES
from .settings import (FloatToIntRounding, RestrictScaling, ScaleRounding, ScalingPerOutput, ScalingSource,
                       ScalingStatsOp, SteMode, coerce)

__all__ = ["quant_spec", "quantizer_spec"]

_CACHE: "weakref.WeakKeyDictionary[type, QuantSpec]" = weakref.WeakKeyDictionary()


#: The library's solvers of derived values: nothing to check where a quantizer keeps them.
_LIBRARY_SOLVERS = frozenset(getattr(fs, name) for name in fs.__all__ if callable(getattr(fs, name)))


def _check_derived(quantizer: type, fmt: ElementFormat) -> None:
    """Refuse a quantizer whose derived values were overridden by a solver of its own (plain
    values are refused when the class is defined)."""
    deps = quantizer.__dependencies__
    for name, attribute in DERIVED_FORMAT_VALUES.items():
        if name not in deps or deps[name][1] in _LIBRARY_SOLVERS:
            continue
        if getattr(quantizer, name) != getattr(fmt, attribute):
            raise ConfigError(name, f"is derived from the format settings (bit widths, signed, narrow_range, "
                                    f"exponent_bias, nan_inf_rule) and cannot be set; it is "
                                    f"{getattr(fmt, attribute)!r} for {fmt.name}")


def _check_saturating(saturating: object, fmt: ElementFormat) -> bool:
    """``saturating`` as a bool; False needs a format with an Inf or NaN code."""
    value = check_bool("saturating", saturating)
    if not value:
        special = fmt.special_values if isinstance(fmt, FloatFormat) else SpecialValues.NONE
        if special is SpecialValues.NONE:
            raise ConfigError("saturating", f"saturating=False needs a format with Inf or NaN codes; "
                                            f"{fmt.name} has none (values past max normal would have no code)")
    return value


def _check_scaling(granularity: ScalingPerOutput, source: ScalingSource, stat: ScalingStatsOp,
                   restrict: RestrictScaling) -> None:
    """Combinations of scale settings that no module implements."""
    if stat is ScalingStatsOp.PERCENTILE and granularity is ScalingPerOutput.GROUP:
        raise ConfigError("scaling_stats_op", "PERCENTILE statistics are per tensor or per channel; "
                                              "group scales use ABS_MAX or MSE")
    if stat is ScalingStatsOp.MSE and (source is not ScalingSource.STATS or restrict is not RestrictScaling.POWER_OF_TWO):
        raise ConfigError("scaling_stats_op", "MSE searches power-of-two scales of each tensor: it needs "
                                              "scaling_source=STATS and restrict_scaling_type=POWER_OF_TWO")
    if source is ScalingSource.RUNNING_STATS and granularity is not ScalingPerOutput.TENSOR:
        raise ConfigError("scaling_per_output", f"RUNNING_STATS scales are per tensor, got per {granularity.value}")


def _check_scale_format(given: object, tensor_scale: object, restrict: RestrictScaling, rounding: ScaleRounding,
                        source: ScalingSource, stat: ScalingStatsOp, granularity: ScalingPerOutput) -> tuple:
    """(scale format or None, tensor scale) by :func:`groupquant.formats.check_scale_setup`, the one
    check of a scale set-up; ConfigError naming the quantizer setting at fault."""
    ts = check_bool("tensor_scale", tensor_scale)
    sf: Optional[ScaleFormat] = None
    if given is not None:
        try:
            sf = get_scale_format(given)
        except (ValueError, TypeError) as err:
            raise ConfigError("scale_format", str(err)) from None
    try:
        check_scale_setup(sf, rounding.value, restrict=restrict.value, tensor_scale=ts, source=source.value,
                          statistic=stat.value, granularity=granularity.value, names=QUANTIZER_SETTINGS)
    except ScaleSetupError as err:
        raise ConfigError(err.setting, str(err)) from None
    return sf, ts


def _check_scheme(name: object, element_format: ElementFormat, sf: Optional[ScaleFormat], granularity: ScalingPerOutput,
                  group_size: Optional[int]) -> None:
    """A quantizer that declares ``block_scheme`` keeps that scheme's element format, scale format and block."""
    if name is None:
        return
    scheme = get_scheme(name)
    if scheme is None:
        raise ConfigError("block_scheme", f"unknown scheme {name!r}; known: {', '.join(known_schemes())} (or None)")
    label = scheme.name.upper()
    if element_format != scheme.element:
        raise ConfigError("bit_width", f"{label} elements are {scheme.element.name}, got {element_format.name}; "
                                       "set block_scheme=None for other elements")
    if sf != scheme.scale_format:
        raise ConfigError("scale_format", f"{label} block scales are {scheme.scale_format.name}, got "
                                          f"{None if sf is None else sf.name}; set block_scheme=None for others")
    if granularity is not ScalingPerOutput.GROUP or group_size != scheme.block_size:
        raise ConfigError("group_size", f"{label} uses groups of {scheme.block_size}, got {group_size!r} "
                                        f"({granularity.value}); for FP4 with {scheme.scale_format.name} scales in "
                                        "other blocks set block_scheme=None")


def quant_spec(__self__: type, element_format: ElementFormat, granularity: ScalingPerOutput,
               group_size: Optional[int], group_dim: Optional[int], channel_dim: Optional[int],
               restrict_scaling_type: object, scale_rounding: object, scaling_source: object,
               scaling_stats_op: object, percentile: object, running_momentum: object, scaling_min_val: object,
               mse_window: object, float_to_int_rounding: object, saturating: object, ste: object,
               element_precision: object = None, scale_format: object = None,
               tensor_scale: object = False, block_scheme: object = None) -> QuantSpec:
    """The solver behind every quantizer's ``spec``: all settings, checked, in one record."""
    _check_derived(__self__, element_format)
    restrict = coerce("restrict_scaling_type", restrict_scaling_type, RestrictScaling)
    source = coerce("scaling_source", scaling_source, ScalingSource)
    stat = coerce("scaling_stats_op", scaling_stats_op, ScalingStatsOp)
    _check_scaling(granularity, source, stat, restrict)
    rounding = coerce("scale_rounding", scale_rounding, ScaleRounding)
    sf, ts = _check_scale_format(scale_format, tensor_scale, restrict, rounding, source, stat, granularity)
    _check_scheme(block_scheme, element_format, sf, granularity, group_size)
    pct = check_number("percentile", percentile, 0.0, 100.0) if stat is ScalingStatsOp.PERCENTILE else 99.999
    momentum = check_number("running_momentum", running_momentum, 0.0, 1.0)
    return QuantSpec(
        name=__self__.__name__, fmt=element_format, granularity=granularity.value,
        group_size=group_size, group_dim=check_optional_int("group_dim", group_dim),
        channel_dim=check_optional_int("channel_dim", channel_dim), restrict=restrict.value,
        scale_rounding=rounding.value, scale_source=source.value,
        stats_op=stat.value, percentile=pct, running_momentum=momentum,
        scaling_min_val=check_number("scaling_min_val", scaling_min_val, 0.0, float("inf")),
        mse_window=check_int("mse_window", mse_window, 0, 16),
        rounding=coerce("float_to_int_rounding", float_to_int_rounding, FloatToIntRounding).value,
        saturating=_check_saturating(saturating, element_format), ste=coerce("ste", ste, SteMode).value,
        element_precision=_check_precision(element_precision), scale_format=sf, tensor_scale=ts)


def _check_precision(given: object):
    """The ``element_precision`` setting as an ElementPrecision (or None); ConfigError naming it."""
    if given is None:
        return None
    try:
        return resolve_precision(given)
    except (ValueError, TypeError) as err:
        raise ConfigError("element_precision", str(err)) from None


def quantizer_spec(quantizer: type) -> QuantSpec:
    """The resolved spec of a quantizer class, computed once per class and cached."""
    spec = _CACHE.get(quantizer)
    if spec is None:
        spec = quantizer.spec
        _CACHE[quantizer] = spec
    return spec
