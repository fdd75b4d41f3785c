"""An element format as the native ops receive it: plain named ints and a float.

Every value is read off :mod:`groupquant.formats` (the one definition of a format's constants),
so the kernels never derive a format rule themselves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from ..formats import ElementFormat, FloatFormat, IntFormat, SpecialValues

__all__ = ["KernelFormat", "kernel_format", "SPECIAL_CODES"]

#: The kernels' numbering of special-value rules (csrc/group_quant.h, enum Special).
SPECIAL_CODES = {SpecialValues.NONE: 0, SpecialValues.IEEE: 1, SpecialValues.NAN_ONLY: 2, SpecialValues.FNUZ: 3}


@dataclass(frozen=True)
class KernelFormat:
    """The op arguments that describe an element format (schema order, see csrc/ops.cpp).

    Float formats fill exponent_bits .. emin, special and nan_code (-1: no NaN code); integer
    formats fill qmin, qmax and frac_bits; ``emax`` (the binade the shared scale aligns to),
    ``max_normal``, ``even_bits`` (the mantissa width ``scale_mode='even'`` rounds amax to) and
    ``negative_zero`` (whether the format encodes -0: signed floats other than FNUZ; elsewhere a
    zero result is +0) are filled for both.
    """

    is_float: bool
    is_signed: bool
    exponent_bits: int
    mantissa_bits: int
    bias: int
    emin: int
    emax: int
    max_normal: float
    qmin: int
    qmax: int
    frac_bits: int
    special: int
    nan_code: int
    even_bits: int
    negative_zero: bool

    def op_args(self) -> Tuple[object, ...]:
        """The fields in schema order."""
        return (self.is_float, self.is_signed, self.exponent_bits, self.mantissa_bits, self.bias, self.emin,
                self.emax, self.max_normal, self.qmin, self.qmax, self.frac_bits, self.special, self.nan_code,
                self.even_bits, self.negative_zero)


def kernel_format(fmt: ElementFormat) -> KernelFormat:
    """The op arguments of ``fmt``."""
    if isinstance(fmt, IntFormat):
        return KernelFormat(
            is_float=False, is_signed=fmt.signed, exponent_bits=0, mantissa_bits=0, bias=0, emin=0,
            emax=fmt.emax, max_normal=float(fmt.max_normal), qmin=fmt.qmin, qmax=fmt.qmax,
            frac_bits=int(fmt.frac_bits), special=0, nan_code=-1, even_bits=fmt.mantissa_bit_width,
            negative_zero=False)
    if isinstance(fmt, FloatFormat):
        nan_code = fmt.nan_code
        return KernelFormat(
            is_float=True, is_signed=fmt.signed, exponent_bits=fmt.exponent_bit_width,
            mantissa_bits=fmt.mantissa_bit_width, bias=int(fmt.bias), emin=fmt.emin, emax=fmt.emax,
            max_normal=float(fmt.max_normal), qmin=0, qmax=0, frac_bits=0,
            special=SPECIAL_CODES[SpecialValues(fmt.special_values)], nan_code=-1 if nan_code is None else nan_code,
            even_bits=fmt.mantissa_bit_width,
            negative_zero=fmt.signed and SpecialValues(fmt.special_values) is not SpecialValues.FNUZ)
    raise TypeError(f"fmt must be an IntFormat or FloatFormat, got {type(fmt).__name__}")
