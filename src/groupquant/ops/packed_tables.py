"""Decoding tables of the packed-weight GEMM, built from the one definition of each format.

- :func:`element_value_table`: ``2**bit_width`` float32 values, entry ``c`` = the element value
  of code ``c`` (the code's bit pattern, unsigned; integer codes are two's complement), exactly
  :func:`groupquant.ops.codes.decode` of that code.
- :func:`scale_table`: 256 float32 values, entry ``s`` = the scale byte ``s`` encodes in a byte-coded
  scale format (E8M0: ``2**(s - 127)``, 255 NaN; E{k}M0, UE4M3 of NVFP4, other unsigned minifloats;
  bytes that are no code of the format, e.g. UE4M3's with the sign bit set, decode to NaN);
  nothing else in the kernel changes.
- :func:`fast_decode`: whether the CPU kernel may decode 8-bit codes arithmetically (int8 or a
  half-precision bit shift) instead of through the table; chosen only when the arithmetic gives
  the table's float32 bits for all 256 codes (NaN for NaN).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import torch

from ..formats import ElementFormat, IntFormat, ScaleFormat
from .codes import decode

__all__ = ["element_value_table", "scale_table", "FastDecode", "fast_decode", "DECODE_TABLE", "DECODE_TABLE16",
           "DECODE_INT8", "DECODE_HALF", "DECODE_NIBBLE_BF16", "MAX_CODE_BITS"]

#: The kernels' decode paths (csrc/packed_gemm.h, enum DecodePath).
DECODE_TABLE, DECODE_TABLE16, DECODE_INT8, DECODE_HALF, DECODE_NIBBLE_BF16 = 0, 1, 2, 3, 4
#: Widest element code the packed GEMM decodes.
MAX_CODE_BITS = 8


def _format_key(fmt: ElementFormat) -> Tuple:
    return (type(fmt).__name__,) + tuple(sorted((k, str(v)) for k, v in vars(fmt).items()))


def element_value_table(fmt: ElementFormat) -> torch.Tensor:
    """float32 ``[2**fmt.bit_width]``: entry ``c`` is the value of code bit pattern ``c``."""
    if fmt.bit_width > MAX_CODE_BITS:
        raise ValueError(f"the packed GEMM decodes codes of at most {MAX_CODE_BITS} bits; {fmt.name} has "
                         f"bit_width={fmt.bit_width}")
    return _value_table(fmt).clone()


def _value_table(fmt: ElementFormat) -> torch.Tensor:
    key = _format_key(fmt)
    if key not in _TABLES:
        w = fmt.bit_width
        pattern = torch.arange(1 << w, dtype=torch.int32)
        if isinstance(fmt, IntFormat) and fmt.signed:
            pattern = torch.where(pattern >= (1 << (w - 1)), pattern - (1 << w), pattern)
        _TABLES[key] = decode(pattern, fmt).to(torch.float32).contiguous()
    return _TABLES[key]


_TABLES: dict = {}


def scale_table(scale_format: ScaleFormat) -> torch.Tensor:
    """float32 ``[256]``: the scale each byte encodes in ``scale_format`` (E{k}M0 or an unsigned
    minifloat; the format's own ``decode``): the NaN code and bytes beyond the format's codes give
    NaN. ValueError for scale formats stored as values (float32, bfloat16)."""
    return scale_format.decode(torch.arange(256, dtype=torch.int32)).contiguous()


@dataclass(frozen=True)
class FastDecode:
    """An arithmetic decode of 8-bit codes the CPU kernel may use (csrc/packed_gemm.h, DecodePath).

    ``path``: DECODE_TABLE (none), DECODE_TABLE16 (4-bit: table in registers), DECODE_NIBBLE_BF16
    (4-bit whose table values are exact in bfloat16: byte shuffles of their bfloat16 bytes), DECODE_INT8
    (``int8(code) * elem_mul``) or DECODE_HALF (half bits ``(c & 0x80) << 8 | (c & 0x7F) << half_shift``
    times ``elem_mul``, NaN where ``c & 0x7F == nan_low7``; -1: no such code).
    """

    path: int = DECODE_TABLE
    elem_mul: float = 1.0
    half_shift: int = 0
    nan_low7: int = -1


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    return bool(torch.equal(nan_a, nan_b)) and bool(torch.equal(a[~nan_a].view(torch.int32), b[~nan_b].view(torch.int32)))


def _int8_values(elem_mul: float) -> torch.Tensor:
    c = torch.arange(256, dtype=torch.int32)
    return torch.where(c >= 128, c - 256, c).to(torch.float32) * elem_mul


def _half_values(shift: int, elem_mul: float, nan_low7: int) -> torch.Tensor:
    c = torch.arange(256, dtype=torch.int32)
    bits = ((c & 0x80) << 8) | (((c & 0x7F) << shift) & 0x7FFF)
    v = bits.to(torch.int16).view(torch.float16).to(torch.float32) * elem_mul
    if nan_low7 >= 0:
        v = torch.where((c & 0x7F) == nan_low7, torch.full_like(v, float("nan")), v)
    return v


def _candidates(fmt: ElementFormat):
    """Arithmetic decodes worth trying for ``fmt`` (each is checked against the table)."""
    if isinstance(fmt, IntFormat):
        yield FastDecode(DECODE_INT8, float(2.0 ** -fmt.frac_bits))
        return
    e = getattr(fmt, "exponent_bit_width", 0)
    if 1 <= e <= 5:
        shift, elem_mul = 10 - getattr(fmt, "mantissa_bit_width", 0), float(2.0 ** (15 - int(fmt.bias)))
        for nan_low7 in (-1, 0x7F):
            yield FastDecode(DECODE_HALF, elem_mul, shift, nan_low7)


def fast_decode(fmt: ElementFormat) -> FastDecode:
    """The CPU kernel's decode path for ``fmt``: an arithmetic one proven equal to the table, else the table."""
    table = _value_table(fmt)
    if fmt.bit_width == 4:
        bf16_exact = bool(((table.view(torch.int32) & 0xFFFF) == 0).all())
        return FastDecode(DECODE_NIBBLE_BF16 if bf16_exact else DECODE_TABLE16)
    if fmt.bit_width != 8:
        return FastDecode()
    for cand in _candidates(fmt):
        try:
            values = (_int8_values(cand.elem_mul) if cand.path == DECODE_INT8
                      else _half_values(cand.half_shift, cand.elem_mul, cand.nan_low7))
        except (RuntimeError, OverflowError):
            continue
        if _same_bits(values, table):
            return cand
    return FastDecode()
