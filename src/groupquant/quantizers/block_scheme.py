"""Scheme mixins: the settings a block scheme (``groupquant.formats.get_scheme``, e.g. NVFP4) fixes,
filled from the scheme's record rather than restated.

A scheme names its element format, scale format, block size and tensor scale once, in
``groupquant.formats``; :func:`scheme_mixin` builds the quantizer mixin that declares
``block_scheme = name`` together with the settings those imply, so the quantizer and
``fake_quant(x, name)`` read the same record. The settings are plain class attributes, so a
variant that changes one is refused by the scheme check (``quantizers/resolve.py``) naming the
setting, and ``block_scheme=None`` variants keep the rest.
"""
from __future__ import annotations

from typing import Any, Dict

from ..formats import get_scheme
from .base import QuantizerMixin
from .settings import RestrictScaling, ScalingPerOutput, ScalingSource, ScalingStatsOp

__all__ = ["scheme_settings", "scheme_mixin"]


def scheme_settings(name: str) -> Dict[str, Any]:
    """The quantizer settings block scheme ``name`` implies: element widths, groups of its block
    size, its scale format (float scales unless a power of two), its tensor scale, and abs-max
    scales from each tensor (the rule its block and tensor scales are defined by)."""
    scheme = get_scheme(name)
    if scheme is None:
        raise ValueError(f"unknown block scheme {name!r}")
    element = scheme.element
    settings: Dict[str, Any] = {
        "block_scheme": scheme.name,
        "scaling_per_output": ScalingPerOutput.GROUP,
        "group_size": scheme.block_size,
        "restrict_scaling_type": (RestrictScaling.POWER_OF_TWO if scheme.scale_format.is_power_of_two
                                  else RestrictScaling.FP),
        "scale_format": scheme.scale_format.name,
        "tensor_scale": scheme.tensor_scale,
        "scaling_source": ScalingSource.STATS,
        "scaling_stats_op": ScalingStatsOp.ABS_MAX,
        "bit_width": element.bit_width,
    }
    if element.is_float:
        settings.update(exponent_bit_width=element.exponent_bit_width, mantissa_bit_width=element.mantissa_bit_width)
    return settings


def scheme_mixin(name: str, class_name: str, module: str, doc: str) -> type:
    """A quantizer mixin class ``class_name`` (defined in ``module``) holding :func:`scheme_settings`."""
    namespace = {"__module__": module, "__qualname__": class_name, "__doc__": doc, **scheme_settings(name)}
    return type(QuantizerMixin)(class_name, (QuantizerMixin,), namespace)
