"""Sub-byte bit streams: w-bit codes packed back to back, least significant bit first.

Element ``i`` of a flat code sequence occupies bits ``[i*w, (i+1)*w)`` of the stream, and bit
``j`` of the stream is bit ``j % 8`` of byte ``j // 8``; each code is written with its own
least significant bit first. So for FP4 (w = 4) byte ``b`` holds element ``2b`` in its low
nibble and ``2b + 1`` in its high nibble (the ONNX FLOAT4E2M1 / INT4 and torchao order), and
for FP6 (w = 6) four elements ``a, b, c, d`` fill three bytes::

    byte 0 = a[5:0]        | b[1:0] << 6
    byte 1 = b[5:2]        | c[3:0] << 4
    byte 2 = c[5:4]        | d[5:0] << 2

The last byte is zero-filled. For w = 8 the stream is the codes themselves and for w = 16 it
is the codes as little-endian 16-bit words.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Tuple

import torch

__all__ = ["packed_nbytes", "pack_bits", "unpack_bits"]

_MAX_WIDTH = 16


def _check_width(bit_width: int) -> None:
    if isinstance(bit_width, bool) or not isinstance(bit_width, int) or not 1 <= bit_width <= _MAX_WIDTH:
        raise ValueError(f"bit_width must be an integer in [1, {_MAX_WIDTH}], got {bit_width!r}")


def packed_nbytes(count: int, bit_width: int) -> int:
    """Bytes that ``count`` codes of ``bit_width`` bits take in a stream: ceil(count * w / 8)."""
    _check_width(bit_width)
    return -(-count * bit_width // 8)


@dataclass(frozen=True)
class _Piece:
    """Bits ``[lo, hi)`` of a unit shared by element ``element`` and byte ``byte`` of that unit."""

    element: int
    byte: int
    element_shift: int  # lo minus the element's first bit
    byte_shift: int  # lo minus the byte's first bit
    mask: int  # (1 << (hi - lo)) - 1


@lru_cache(maxsize=None)
def _unit(bit_width: int) -> Tuple[int, int, Tuple[_Piece, ...]]:
    """The repeating unit of a stream: elements per unit, bytes per unit, and the pieces where
    element bits and byte bits overlap (lcm(w, 8) bits: 2 elements in 1 byte for FP4, 4 in 3 for FP6)."""
    g = math.gcd(bit_width, 8)
    elements, nbytes = 8 // g, bit_width // g
    pieces = []
    for e in range(elements):
        for b in range(nbytes):
            lo, hi = max(8 * b, e * bit_width), min(8 * b + 8, (e + 1) * bit_width)
            if lo < hi:
                pieces.append(_Piece(e, b, lo - e * bit_width, lo - 8 * b, (1 << (hi - lo)) - 1))
    return elements, nbytes, tuple(pieces)


def pack_bits(codes: torch.Tensor, bit_width: int) -> torch.Tensor:
    """Pack the low ``bit_width`` bits of every code of ``codes`` (any integer dtype, read in
    row-major order) into a 1-D uint8 stream of ``packed_nbytes(codes.numel(), bit_width)`` bytes.

    Negative codes (two's complement integers) keep their low ``bit_width`` bits.
    """
    _check_width(bit_width)
    if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
        raise TypeError(f"codes must have an integer dtype, got {codes.dtype}")
    count = codes.numel()
    elements, nbytes, pieces = _unit(bit_width)
    units = -(-count // elements)
    flat = _low_bits(codes.reshape(-1), bit_width)
    if units * elements != count:
        flat = torch.cat([flat, flat.new_zeros(units * elements - count)])
    flat = flat.view(units, elements)
    columns = []
    for byte in range(nbytes):  # each byte of the unit: its pieces or-ed together (distinct bits)
        column = None
        for p in pieces:  # each step but the first of a piece works in place on its own temporary
            if p.byte == byte:
                codes_e = flat[:, p.element]
                part = (codes_e >> p.element_shift).bitwise_and_(p.mask) if p.element_shift else codes_e & p.mask
                if p.byte_shift:
                    part.bitwise_left_shift_(p.byte_shift)
                column = part if column is None else column.bitwise_or_(part)
        columns.append(column)
    out = columns[0].unsqueeze(1) if nbytes == 1 else torch.stack(columns, dim=1)
    return out.reshape(-1)[: packed_nbytes(count, bit_width)].to(torch.uint8)


def _low_bits(flat: torch.Tensor, bit_width: int) -> torch.Tensor:
    """Codes in the narrowest dtype that holds every piece: uint8 for widths up to 8 (the low byte
    of each code, two's complement for negative ones; every piece of a byte fits in it), else int32."""
    if bit_width > 8:
        return flat.to(torch.int32)
    if flat.dtype in (torch.int8, torch.uint8):
        return flat.view(torch.uint8)
    return (flat & 0xFF).to(torch.uint8)


def unpack_bits(stream: torch.Tensor, bit_width: int, count: int, signed: bool = False) -> torch.Tensor:
    """The first ``count`` codes of a uint8 stream written by :func:`pack_bits`, as int32.

    ``signed`` sign-extends each code from ``bit_width`` bits (two's complement).
    """
    _check_width(bit_width)
    if not isinstance(stream, torch.Tensor) or stream.dtype != torch.uint8 or stream.dim() != 1:
        raise TypeError("a packed stream is a 1-D uint8 tensor, got "
                        f"{getattr(stream, 'dtype', type(stream).__name__)} of shape {tuple(getattr(stream, 'shape', ()))}")
    need = packed_nbytes(count, bit_width)
    if stream.numel() != need:
        raise ValueError(f"a stream of {count} codes of {bit_width} bits has {need} bytes, got {stream.numel()}")
    elements, nbytes, pieces = _unit(bit_width)
    units = -(-count // elements)
    bytes_ = stream if bit_width <= 8 else stream.to(torch.int32)  # a code of up to 8 bits fits a byte
    if units * nbytes != need:
        bytes_ = torch.cat([bytes_, bytes_.new_zeros(units * nbytes - need)])
    bytes_ = bytes_.view(units, nbytes)
    codes = bytes_.new_zeros(units, elements)
    for p in pieces:
        codes[:, p.element] += ((bytes_[:, p.byte] >> p.byte_shift) & p.mask) << p.element_shift
    codes = codes.reshape(-1)[:count].to(torch.int32)
    if signed:
        codes = torch.where(codes >= (1 << (bit_width - 1)), codes - (1 << bit_width), codes)
    return codes
