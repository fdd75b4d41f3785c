"""``describe(Q)``: the resolved settings and derived values of a quantizer, printable."""
from __future__ import annotations

import enum
from typing import Any, Dict

from .. import inject
from ..formats import SpecialValues
from .settings import (FloatToIntRounding, RestrictScaling, ScaleRounding, ScalingPerOutput, ScalingSource,
                       ScalingStatsOp, SteMode, coerce)

__all__ = ["QuantizerSettings", "describe"]


#: Display order: format settings, derived format values, scaling, rounding; others follow.
_ORDER = (
    "bit_width", "exponent_bit_width", "mantissa_bit_width", "signed", "narrow_range", "nan_inf_rule",
    "exponent_bias", "format_name", "bias", "special_values", "qmin", "qmax", "emax", "max_normal",
    "min_normal", "min_subnormal", "scaling_per_output", "scaling_per_output_channel", "granularity",
    "group_size", "group_dim", "channel_dim", "restrict_scaling_type", "scale_rounding", "scaling_source",
    "scaling_stats_op", "percentile", "running_momentum", "scaling_min_val", "scale_rule",
    "float_to_int_rounding", "ste",
)


#: Settings that take an enum member or its name as a string; describe() shows the member either way.
_ENUM_SETTINGS = {
    "nan_inf_rule": SpecialValues, "scaling_per_output": ScalingPerOutput, "restrict_scaling_type": RestrictScaling,
    "scale_rounding": ScaleRounding, "float_to_int_rounding": FloatToIntRounding, "scaling_source": ScalingSource,
    "scaling_stats_op": ScalingStatsOp, "ste": SteMode,
}


def _as_enums(settings: Dict[str, Any]) -> Dict[str, Any]:
    """String values of enum settings (``weight_scale_rounding="even"``) as their enum members."""
    out = dict(settings)
    for name, enum_type in _ENUM_SETTINGS.items():
        if isinstance(out.get(name), str):
            out[name] = coerce(name, out[name], enum_type)
    return out


def _ordered(settings: Dict[str, Any]) -> Dict[str, Any]:
    """``settings`` with the names of :data:`_ORDER` first, in that order."""
    rank = {name: i for i, name in enumerate(_ORDER)}
    names = sorted(settings, key=lambda n: (rank.get(n, len(rank)), list(settings).index(n)))
    return {name: settings[name] for name in names}


def _text(value: Any) -> str:
    """Short text of a plain value: enums as ``Type.NAME``."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


class QuantizerSettings(Dict[str, Any]):
    """A dict of setting name -> resolved value that prints as an aligned table."""

    quantizer_name: str = ""

    def __str__(self) -> str:
        width = max((len(name) for name in self), default=0)
        rows = [f"{name.ljust(width)}  {_text(value)}" for name, value in self.items()]
        return "\n".join([self.quantizer_name] + rows) if self.quantizer_name else "\n".join(rows)

    __repr__ = __str__

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def describe(quantizer: type) -> QuantizerSettings:
    """Every plain setting and derived value of ``quantizer``, resolved (bit widths, bias, max
    normal, NaN/Inf rule, scaling granularity, group size/dim, scale rule, rounding, ...).

    Accepts a quantizer class (an Injector subclass) or anything with a ``quantizer`` attribute
    holding one (the proxies of a quant layer). Misconfiguration raises the same ConfigError
    (naming the setting) that building the quantizer raises.
    """
    injector = quantizer
    if not isinstance(quantizer, type) and hasattr(quantizer, "quantizer"):
        injector = quantizer.quantizer
    if not (isinstance(injector, type) and issubclass(injector, inject.Injector)):
        raise TypeError(f"describe() takes a quantizer class (an Injector subclass) or a quant proxy, "
                        f"got {quantizer!r}")
    settings = QuantizerSettings(_ordered(_as_enums(inject.describe(injector))))
    settings.quantizer_name = injector.__name__
    return settings
