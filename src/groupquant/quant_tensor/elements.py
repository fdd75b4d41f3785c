"""From dequantized values and the shared scales the op produced back to elements and codes.

``value = element * scale`` (zero point 0 for groupquant's quantizers; ``value = (element -
zero_point) * scale`` in general) where ``scale`` is the shared scale ``X`` exactly as the op
produced it (an E8M0 power of two for MX) and ``element`` is on the format's grid: for integer
formats ``element = int * 2**-frac_bits`` (MXINT8 is 1.6 fixed point). Elements are recovered by
rounding ``value / scale`` onto the grid, which undoes the float32 rounding of the product
exactly. The format object is the one the op used; nothing is rebuilt from widths.

:class:`FormatAttributes` gives every quant tensor the attribute names Brevitas code reads
(``bit_width``, ``signed``, ``exponent_bit_width``, ``nan_values``, ...), read off ``fmt``.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..formats import ElementFormat, FloatFormat, IntFormat, SpecialValues
from ..ops import code_dtype, encode, round_to_format

__all__ = ["int_codes", "int_factor", "float_elements", "float_codes", "FormatAttributes"]


def _ones(n: int) -> str:
    return "1" * n


class FormatAttributes:
    """Read-only attributes derived from the ``fmt`` field (an ``IntFormat`` or ``FloatFormat``)."""

    fmt: ElementFormat
    training: bool

    @property
    def bit_width(self) -> int:
        """Total element bits."""
        return self.fmt.bit_width

    @property
    def signed(self) -> bool:
        return self.fmt.signed

    @property
    def is_signed(self) -> bool:
        return self.fmt.signed

    @property
    def signed_t(self) -> torch.Tensor:
        """``signed`` as a 0-d bool tensor (Brevitas's field)."""
        return torch.tensor(self.fmt.signed)

    @property
    def training_t(self) -> torch.Tensor:
        """``training`` as a 0-d bool tensor (Brevitas's field)."""
        return torch.tensor(self.training)

    @property
    def narrow_range(self) -> bool:
        """Integers: symmetric range without the most negative code."""
        return bool(getattr(self.fmt, "narrow_range", False))

    @property
    def exponent_bit_width(self) -> int:
        return self.fmt.exponent_bit_width

    @property
    def mantissa_bit_width(self) -> int:
        return self.fmt.mantissa_bit_width

    @property
    def exponent_bias(self) -> int:
        return self.fmt.bias

    @property
    def nan_inf_rule(self) -> SpecialValues:
        return self.fmt.special_values

    @property
    def inf_values(self) -> Optional[Tuple[str, ...]]:
        """Mantissa bit strings that encode Inf in the all-ones exponent (Brevitas's form):
        ``('00',)`` for IEEE e5m2, None where the format has no Inf."""
        if isinstance(self.fmt, FloatFormat) and self.fmt.special_values is SpecialValues.IEEE:
            return ("0" * self.fmt.mantissa_bit_width,)
        return None

    @property
    def nan_values(self) -> Optional[Tuple[str, ...]]:
        """Mantissa bit strings that encode NaN in the all-ones exponent (Brevitas's form):
        ``('111',)`` for OCP e4m3, every non-zero mantissa for IEEE, None otherwise (FNUZ's one
        NaN is the negative-zero code, as Brevitas also leaves it out)."""
        if not isinstance(self.fmt, FloatFormat):
            return None
        m = self.fmt.mantissa_bit_width
        if self.fmt.special_values is SpecialValues.NAN_ONLY:
            return (_ones(m),)
        if self.fmt.special_values is SpecialValues.IEEE:
            return tuple(format(i, f"0{m}b") for i in range(1, 2 ** m))
        return None


def _ratio(value: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor) -> torch.Tensor:
    """``value / scale + zero_point`` in float32 (a zero zero-point keeps -0)."""
    y = value.detach().float() / scale.detach().float()
    zp = zero_point.detach().float()
    return torch.where(zp == 0, y, y + zp)


def int_factor(scale: torch.Tensor, fmt: IntFormat) -> torch.Tensor:
    """The factor of integer codes under shared scale ``scale``: ``scale * 2**-frac_bits``
    (Brevitas's ``value = int * scale``; MXINT8's elements are ``int / 64``)."""
    return scale * float(2.0 ** -fmt.frac_bits)


def int_codes(value: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, fmt: IntFormat) -> torch.Tensor:
    """Integer codes (``code_dtype(fmt)``: int8 for <= 8 bits) of integer-quantized values; NaN -> 0."""
    n = torch.round(_ratio(value, scale, zero_point) * float(2 ** fmt.frac_bits))
    n = torch.nan_to_num(n, nan=0.0).clamp(fmt.qmin, fmt.qmax)
    return n.to(torch.int32).to(code_dtype(fmt))


def float_elements(value: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor,
                   fmt: FloatFormat) -> torch.Tensor:
    """Element values (float32, on ``fmt``'s grid; NaN stays NaN, Inf stays Inf for
    non-saturated IEEE values) of float-quantized values."""
    y = _ratio(value, scale, zero_point)
    inf = torch.isinf(y)
    elements = round_to_format(torch.where(inf, torch.zeros_like(y), y), fmt, "even")
    return torch.where(inf, y, elements) if fmt.has_inf else torch.where(inf, torch.full_like(y, float("nan")), elements)


def float_codes(value: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Bit codes (uint8 for <= 8 bits) of float-quantized values (NaN -> the format's NaN code)."""
    return encode(float_elements(value, scale, zero_point, fmt), fmt)
