"""The solver that assembles a quantizer's settings into its quantize-dequantize module."""
from __future__ import annotations

from typing import Optional

from torch import nn

from ..core import DynamicQuant, ScaledQuant, ScaleGranularity
from ..formats import ElementFormat
from ..inject import ConfigError
from .format_solvers import DERIVED_FORMAT_VALUES
from .settings import FloatToIntRounding, RestrictScaling, ScaleRounding, SteMode, coerce

__all__ = ["derived_values_untouched", "tensor_quant"]


def derived_values_untouched(__self__: type, element_format: ElementFormat) -> bool:
    """Refuse a quantizer whose derived values (max_normal, emax, ...) were overridden: they
    follow the widths, so an override would be silently ignored otherwise."""
    for name, attribute in DERIVED_FORMAT_VALUES.items():
        if name in __self__ and getattr(__self__, name) != getattr(element_format, attribute):
            raise ConfigError(name, f"is derived from the format settings (bit widths, signed, narrow_range, "
                                    f"exponent_bias, nan_inf_rule) and cannot be set; it is "
                                    f"{getattr(element_format, attribute)!r} for {element_format.name}")
    return True


def tensor_quant(element_format: ElementFormat, scale_granularity: ScaleGranularity,
                 scale_impl: Optional[nn.Module], restrict_scaling_type: object, scale_rounding: object,
                 float_to_int_rounding: object, ste: object, _derived_checked: bool) -> nn.Module:
    """The quant module: :class:`DynamicQuant` (abs-max scales through ``fake_quant``) or
    :class:`ScaledQuant` around ``scale_impl``. Reading it builds a new module each time."""
    rounding = coerce("float_to_int_rounding", float_to_int_rounding, FloatToIntRounding).value
    ste_mode = coerce("ste", ste, SteMode).value
    if scale_impl is None:
        restrict = coerce("restrict_scaling_type", restrict_scaling_type, RestrictScaling).value
        mode = coerce("scale_rounding", scale_rounding, ScaleRounding).value
        return DynamicQuant(element_format, scale_granularity, restrict, mode, rounding, ste_mode)
    if not isinstance(scale_impl, nn.Module):
        raise ConfigError("scale_impl", f"must be an nn.Module (x -> scale) or None, got {type(scale_impl).__name__}")
    return ScaledQuant(element_format, scale_granularity, scale_impl, rounding, ste_mode)
