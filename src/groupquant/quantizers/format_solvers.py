"""Solvers that turn width settings into the element format, and the values derived from it.

The format objects of :mod:`groupquant.formats` are the one source of every derived number
(bias, emax, max normal, NaN/Inf codes): the solvers here only check the settings, build the
format, and read its properties. A width combination the format core refuses becomes a
ConfigError naming the setting at fault.
"""
from __future__ import annotations

from typing import Optional

from ..formats import ElementFormat, FloatFormat, IntFormat, SpecialValues
from ..inject import ConfigError
from .checks import check_bool, check_int, check_optional_int
from .settings import NanInfRule, coerce

__all__ = [
    "int_element_format", "float_element_format", "format_name", "max_normal", "emax",
    "min_subnormal", "min_normal", "exponent_bias_of", "resolved_nan_inf_rule", "qmin", "qmax",
    "DERIVED_FORMAT_VALUES",
]


def int_element_format(bit_width: int, signed: bool, narrow_range: bool) -> IntFormat:
    """The integer element format (fixed point with emax 0, as MXINT8's 1.6 layout)."""
    check_int("bit_width", bit_width, 2, 16)
    check_bool("signed", signed)
    check_bool("narrow_range", narrow_range)
    return IntFormat(bit_width, signed=signed, narrow_range=narrow_range)


def _float_format(e: int, m: int, rule: SpecialValues, signed: bool, bias: Optional[int]) -> FloatFormat:
    """Build the minifloat; the format core's refusals become ConfigErrors naming the setting."""
    try:
        FloatFormat(e, m, SpecialValues.NONE, signed, bias)
    except ValueError as err:
        raise ConfigError("exponent_bias" if bias is not None else "exponent_bit_width", str(err)) from None
    try:
        return FloatFormat(e, m, rule, signed, bias)
    except ValueError as err:
        raise ConfigError("nan_inf_rule", f"{rule.name} cannot be encoded with e{e}m{m}"
                                          f"{'' if signed else ' unsigned'}: {err}") from None


def float_element_format(bit_width: int, exponent_bit_width: int, mantissa_bit_width: int, signed: bool,
                         nan_inf_rule: object, exponent_bias: Optional[int]) -> FloatFormat:
    """The minifloat element format; ``bit_width`` must equal exponent + mantissa + sign bits."""
    check_int("exponent_bit_width", exponent_bit_width, 1)
    check_int("mantissa_bit_width", mantissa_bit_width, 0)
    check_bool("signed", signed)
    check_int("bit_width", bit_width, 2, 16)
    check_optional_int("exponent_bias", exponent_bias)
    total = exponent_bit_width + mantissa_bit_width + int(signed)
    if total != bit_width:
        raise ConfigError("bit_width", f"bit_width={bit_width} but exponent_bit_width={exponent_bit_width} + "
                                       f"mantissa_bit_width={mantissa_bit_width} + sign {int(signed)} = {total}")
    rule = coerce("nan_inf_rule", nan_inf_rule, NanInfRule)
    return _float_format(exponent_bit_width, mantissa_bit_width, rule, signed, exponent_bias)


def format_name(element_format: ElementFormat) -> str:
    """The format's name (``'fp8_e4m3'``, ``'int8'``, ...)."""
    return element_format.name


def max_normal(element_format: ElementFormat) -> float:
    """Largest finite element value."""
    return element_format.max_normal


def emax(element_format: ElementFormat) -> int:
    """Exponent of the largest binade (the E8M0 floor rule aligns amax to it)."""
    return element_format.emax


def min_subnormal(element_format: ElementFormat) -> float:
    """Smallest positive element value."""
    return element_format.min_subnormal


def min_normal(element_format: FloatFormat) -> float:
    """Smallest positive normal value of a minifloat."""
    return element_format.min_normal


def exponent_bias_of(element_format: FloatFormat) -> int:
    """The exponent bias in use (the ``exponent_bias`` setting, or the standard one)."""
    return element_format.bias


def resolved_nan_inf_rule(element_format: FloatFormat) -> SpecialValues:
    """The NaN/Inf rule after OCP's derivation from the widths (NAN_ONLY, IEEE, FNUZ or NONE)."""
    return element_format.special_values


def qmin(element_format: IntFormat) -> int:
    """Smallest integer code."""
    return element_format.qmin


def qmax(element_format: IntFormat) -> int:
    """Largest integer code."""
    return element_format.qmax


#: Derived setting name -> the format attribute it reads; a quantizer that overrides one of
#: these names (``let(max_normal=...)``) is refused when built: derived values follow the widths.
DERIVED_FORMAT_VALUES = {
    "format_name": "name", "max_normal": "max_normal", "emax": "emax", "min_subnormal": "min_subnormal",
    "min_normal": "min_normal", "bias": "bias", "special_values": "special_values", "qmin": "qmin",
    "qmax": "qmax",
}
