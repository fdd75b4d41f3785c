"""Element-format mixins: the widths of one element format, to stack with a scaling mixin and a
role (``class MXFloat8e4m3Weight(Fp8e4m3Mixin, MXScaling, WeightQuantizer, FloatQuantizer)``), as
Brevitas composes its OCP MX quantizers. Every derived value (bias, emax, max normal, NaN/Inf
codes) follows from these widths and the quantizer's NaN/Inf rule.
"""
from __future__ import annotations

from .base import QuantizerMixin

__all__ = ["Fp8e4m3Mixin", "Fp8e5m2Mixin", "Fp6e3m2Mixin", "Fp6e2m3Mixin", "Fp4e2m1Mixin", "MXInt8Mixin"]


class Fp8e4m3Mixin(QuantizerMixin):
    """8-bit E4M3 elements."""

    bit_width = 8
    exponent_bit_width = 4
    mantissa_bit_width = 3


class Fp8e5m2Mixin(QuantizerMixin):
    """8-bit E5M2 elements."""

    bit_width = 8
    exponent_bit_width = 5
    mantissa_bit_width = 2


class Fp6e3m2Mixin(QuantizerMixin):
    """6-bit E3M2 elements (OCP: no NaN/Inf)."""

    bit_width = 6
    exponent_bit_width = 3
    mantissa_bit_width = 2


class Fp6e2m3Mixin(QuantizerMixin):
    """6-bit E2M3 elements (OCP: no NaN/Inf)."""

    bit_width = 6
    exponent_bit_width = 2
    mantissa_bit_width = 3


class Fp4e2m1Mixin(QuantizerMixin):
    """4-bit E2M1 elements (OCP: no NaN/Inf)."""

    bit_width = 4
    exponent_bit_width = 2
    mantissa_bit_width = 1


class MXInt8Mixin(QuantizerMixin):
    """MXINT8 elements: int8 codes in the narrow range [-127, 127], read as 1.6 fixed point."""

    bit_width = 8
    narrow_range = True
