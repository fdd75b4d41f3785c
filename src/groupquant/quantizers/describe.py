"""``describe(Q)``: the resolved settings and derived values of a quantizer, printable."""
from __future__ import annotations

import enum
from typing import Any, Dict

from .. import inject
from ..formats import SpecialValues
from .format_solvers import DERIVED_FORMAT_VALUES
from .resolve import quantizer_spec
from .settings import (FloatToIntRounding, RestrictScaling, ScaleRounding, ScalingPerOutput, ScalingSource,
                       ScalingStatsOp, SteMode, coerce)
from .vocabulary import SETTINGS

__all__ = ["QuantizerSettings", "describe"]


#: Derived values describe() shows after the settings (those the format has).
_DERIVED_SHOWN = ("format_name", "bias", "special_values", "qmin", "qmax", "emax", "max_normal", "min_normal",
                  "min_subnormal")

#: Settings that take an enum member or its name as a string; describe() shows the member either way.
_ENUM_SETTINGS = {
    "nan_inf_rule": SpecialValues, "scaling_per_output": ScalingPerOutput, "restrict_scaling_type": RestrictScaling,
    "scale_rounding": ScaleRounding, "float_to_int_rounding": FloatToIntRounding, "scaling_source": ScalingSource,
    "scaling_stats_op": ScalingStatsOp, "ste": SteMode,
}


def _setting(quantizer: type, name: str) -> Any:
    """The resolved value of one setting, enums given as strings shown as members."""
    given = getattr(quantizer, name)
    if name in _ENUM_SETTINGS and isinstance(given, str):
        return coerce(name, given, _ENUM_SETTINGS[name])
    return given


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
    """The settings of ``quantizer`` (each name of :data:`groupquant.quantizers.vocabulary.SETTINGS`
    it declares, plus its ``__extra_settings__``), resolved, then the values derived from them
    (bias, NaN/Inf rule, emax, max normal, ...) and the scale rule. ``Q.describe()`` is the same.

    Accepts a quantizer class or anything with a ``quantizer`` attribute holding one (the proxies
    of a quant layer). Misconfiguration raises the ConfigError (naming the setting) that building
    the quantizer raises.
    """
    injector = quantizer
    if not isinstance(quantizer, type) and hasattr(quantizer, "quantizer"):
        injector = quantizer.quantizer
    if not (isinstance(injector, type) and issubclass(injector, inject.Injector)):
        raise TypeError(f"describe() takes a quantizer class (an Injector subclass) or a quant proxy, "
                        f"got {quantizer!r}")
    spec = quantizer_spec(injector)
    deps = injector.__dependencies__
    extra = [n for base in injector.__mro__ for n in base.__dict__.get("__extra_settings__", ())]
    settings = QuantizerSettings()
    for name in list(SETTINGS) + extra:
        if name in deps and name not in settings and name != "scaling_per_output_channel":
            settings[name] = _setting(injector, name)
    settings["scaling_per_output"] = ScalingPerOutput(spec.granularity)
    for name in _DERIVED_SHOWN:
        attribute = DERIVED_FORMAT_VALUES[name]
        if hasattr(spec.fmt, attribute) and name in deps:
            settings[name] = getattr(spec.fmt, attribute)
    settings["scale_rule"] = spec.describe_rule()
    settings.quantizer_name = injector.__name__
    return settings
