"""From dequantized values and scales back to a format's elements and codes.

``value = (element - zero_point) * scale`` where, for float formats, ``element`` is on the
format's value grid, and for integer formats ``element`` is the integer itself (the scale
of an integer quant tensor already includes the fixed-point factor ``2**-frac_bits``).
Elements are recovered by rounding ``value / scale + zero_point`` onto the grid, which undoes
the float32 rounding of the product exactly (the error is far below half a grid step).
"""
from __future__ import annotations

import torch

from ..formats import FloatFormat, IntFormat
from ..ops import code_dtype, encode, round_to_format

__all__ = ["int_codes", "float_elements", "float_codes", "FloatWidthsMixin"]


class FloatWidthsMixin:
    """Mixin for float quant tensors: ``bit_width`` and ``fmt`` from the width fields
    (``exponent_bit_width``, ``mantissa_bit_width``, ``signed``, ``nan_inf_rule``, ``exponent_bias``)."""

    exponent_bit_width: int
    mantissa_bit_width: int
    signed: bool
    nan_inf_rule: object
    exponent_bias: object

    @property
    def bit_width(self) -> int:
        """Total element bits: sign + exponent + mantissa."""
        return self.exponent_bit_width + self.mantissa_bit_width + int(self.signed)

    @property
    def fmt(self) -> FloatFormat:
        """The element format."""
        return FloatFormat(self.exponent_bit_width, self.mantissa_bit_width, self.nan_inf_rule, self.signed,
                           self.exponent_bias)


def int_codes(value: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, fmt: IntFormat) -> torch.Tensor:
    """Integer codes (``code_dtype(fmt)``: int8 for <= 8 bits) of integer-quantized values; NaN -> 0."""
    n = torch.round(value.detach().float() / scale.detach().float() + zero_point.detach().float())
    n = torch.nan_to_num(n, nan=0.0).clamp(fmt.qmin, fmt.qmax)
    return n.to(torch.int32).to(code_dtype(fmt))


def float_elements(value: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor,
                   fmt: FloatFormat) -> torch.Tensor:
    """Element values (float32, on ``fmt``'s grid; NaN stays NaN) of float-quantized values."""
    y = value.detach().float() / scale.detach().float()
    zp = zero_point.detach().float()
    y = torch.where(zp == 0, y, y + zp)  # adding a zero would turn -0 into +0
    return round_to_format(y, fmt, "even")


def float_codes(value: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Bit codes (uint8 for <= 8 bits) of float-quantized values (NaN -> the format's NaN code)."""
    return encode(float_elements(value, scale, zero_point, fmt), fmt)
