"""Element codes: the integers of a format's bit encoding, to and from element values.

Float formats: ``sign << (E + M) | exponent_field << M | mantissa_field`` (uint8 for <= 8 bits,
int32 above), the same bits ``ml_dtypes`` / torch float8 types hold. NaN is written as the
format's NaN code (``fmt.nan_code``; 0 where the format has none: such a group's NaN scale is
what marks it). FNUZ formats have no negative zero: -0 encodes as 0.
Integer formats: the two's complement integer itself (int8 for <= 8 bits, int16 above; uint8
for unsigned <= 8 bits, int32 above).
"""
from __future__ import annotations

import torch

from ..formats import ElementFormat, FloatFormat, IntFormat, SpecialValues
from .bits import exp2i, floor_log2

__all__ = ["code_dtype", "encode", "decode"]


def code_dtype(fmt: ElementFormat) -> torch.dtype:
    """The integer dtype that holds ``fmt``'s codes."""
    if isinstance(fmt, IntFormat):
        if fmt.bit_width <= 8:
            return torch.int8 if fmt.signed else torch.uint8
        return torch.int16 if fmt.signed else torch.int32
    return torch.uint8 if fmt.bit_width <= 8 else torch.int32


def encode(v: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    """Codes of element values ``v`` (float32, on the grid of ``fmt``; NaN allowed, +-Inf for IEEE formats)."""
    v = v.float()
    if isinstance(fmt, IntFormat):
        n = torch.nan_to_num(v * float(2 ** fmt.frac_bits), nan=0.0)
        return n.to(torch.int32).to(code_dtype(fmt))
    m, ebits = fmt.mantissa_bit_width, fmt.exponent_bit_width
    a = v.abs()
    nan = torch.isnan(v)
    a = torch.where(nan, torch.zeros_like(a), a)
    normal = a >= fmt.min_normal
    e = floor_log2(a).clamp(min=fmt.emin)
    mant_units = (a * exp2i(m - e)).to(torch.int32)  # exact integer in [0, 2**(m+1))
    field_e = torch.where(normal, e + fmt.bias, torch.zeros_like(e))
    field_m = torch.where(normal, mant_units - (1 << m), mant_units)
    code = (field_e << m) | field_m
    if fmt.has_inf:  # IEEE: +-Inf is the all-ones exponent with a zero mantissa (sign added below)
        code = torch.where(torch.isinf(a), torch.full_like(code, ((1 << ebits) - 1) << m), code)
    if fmt.signed:
        neg = torch.signbit(v) & ~nan
        if not fmt.has_negative_zero:  # (FNUZ: -0 is the NaN code; a zero encodes as +0)
            neg = neg & (a > 0)
        code = code | (neg.to(torch.int32) << (ebits + m))
    if fmt.nan_code is not None:
        code = torch.where(nan, torch.full_like(code, fmt.nan_code), code)
    return code.to(code_dtype(fmt))


def decode(codes: torch.Tensor, fmt: ElementFormat) -> torch.Tensor:
    """Element values (float32) of ``codes``; NaN/Inf codes decode to NaN/Inf."""
    if isinstance(fmt, IntFormat):
        return codes.to(torch.float32) * (2.0 ** -fmt.frac_bits)
    m, ebits = fmt.mantissa_bit_width, fmt.exponent_bit_width
    c = codes.to(torch.int32) & ((1 << fmt.bit_width) - 1)
    field_m = c & ((1 << m) - 1)
    field_e = (c >> m) & ((1 << ebits) - 1)
    normal = field_e > 0
    units = torch.where(normal, field_m + (1 << m), field_m).to(torch.float32)
    e = torch.where(normal, field_e - fmt.bias, torch.full_like(field_e, fmt.emin))
    v = units * exp2i(e - m)
    if fmt.signed:
        v = torch.where(((c >> (ebits + m)) & 1).bool(), -v, v)
    sv = fmt.special_values
    if sv is SpecialValues.IEEE:
        top = field_e == (1 << ebits) - 1
        inf = torch.copysign(torch.full_like(v, float("inf")), v)
        v = torch.where(top, torch.where(field_m == 0, inf, torch.full_like(v, float("nan"))), v)
    elif sv is SpecialValues.NAN_ONLY:
        v = torch.where((c & fmt.nan_code) == fmt.nan_code, torch.full_like(v, float("nan")), v)
    elif sv is SpecialValues.FNUZ:
        v = torch.where(c == fmt.nan_code, torch.full_like(v, float("nan")), v)
    return v
