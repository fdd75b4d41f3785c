"""The shared scale of a group: scale modes, E8M0 encoding, float scales.

For a group with largest magnitude ``amax`` and an element format whose largest binade is
``emax`` (OCP's emax_elem), the power-of-two modes choose the shared exponent ``e`` (scale 2**e):

- ``floor`` (OCP MX v1.0 default): ``e = floor(log2(amax)) - emax``.
- ``ceil``: ``e = ceil(log2(amax)) - emax`` (nothing saturates, one binade of range lost).
- ``even``: round amax to the element's mantissa width (nearest-even) first, then ``floor``.
- ``rceil``: ``e = ceil(log2(amax / max_normal))``, the smallest scale that avoids saturation.

All are computed exactly from exponent bits, clamped to E8M0's [-127, 127] and capped at
``dtype_emax - emax`` (127 - emax for float32/bfloat16 input, 15 - emax for float16): the largest
exponent ``floor`` can reach for that dtype, so that ``ceil``/``even``/``rceil`` never turn a
finite block near the dtype's maximum into Inf (such a block saturates instead). An all-zero group
gets 2**-127 (code 0); a group with NaN or Inf gets a NaN scale (code 0xFF), which makes every
element of the group NaN, as the spec's X = NaN does.

``float`` is the non power-of-two variant: ``scale = amax / max_normal`` in float32 (a group
whose scale would be 0 uses 1).
"""
from __future__ import annotations

import math
from typing import Tuple

import torch

from ..formats import E8M0, ElementFormat
from .bits import exp2i, floor_log2, significand

__all__ = ["SCALE_MODES", "POWER_OF_TWO_MODES", "shared_exponent", "group_scale", "exponent_cap",
           "e8m0_encode", "e8m0_decode"]

POWER_OF_TWO_MODES = ("floor", "ceil", "even", "rceil")
SCALE_MODES = POWER_OF_TWO_MODES + ("float",)


def _round_significand_carry(amax: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """1 where rounding amax's significand to ``mantissa_bits`` (nearest-even) carries into 2.0, else 0."""
    sig = significand(amax)  # [1, 2)
    steps = torch.round(sig * float(2 ** mantissa_bits))  # exact product, RNE
    return (steps >= 2 ** (mantissa_bits + 1)).to(torch.int32)


def exponent_cap(dtype: torch.dtype, fmt: ElementFormat) -> int:
    """Largest shared exponent for input of ``dtype``: floor(log2(dtype max)) - emax, within E8M0."""
    dtype_emax = math.frexp(torch.finfo(dtype).max)[1] - 1
    return min(E8M0.max_exponent, dtype_emax - fmt.emax)


def shared_exponent(amax: torch.Tensor, fmt: ElementFormat, mode: str,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The shared exponent (int32) for finite, non-negative ``amax`` of input dtype ``dtype``.

    Clamped to [-127, :func:`exponent_cap`]; zero amax gives E8M0's minimum exponent (-127).
    """
    amax = amax.float()
    e_a = floor_log2(amax)
    if mode == "floor":
        e = e_a - fmt.emax
    elif mode == "ceil":
        not_pow2 = (significand(amax) > 1.0).to(torch.int32)
        e = e_a + not_pow2 - fmt.emax
    elif mode == "even":
        e = e_a + _round_significand_carry(amax, fmt.mantissa_bit_width) - fmt.emax
    elif mode == "rceil":
        m_max, e_max = math.frexp(fmt.max_normal)
        e = e_a - (e_max - 1) + (significand(amax) > 2.0 * m_max).to(torch.int32)
    else:
        raise ValueError(f"scale_mode must be one of {SCALE_MODES}, got {mode!r}")
    e = torch.where(amax > 0, e, torch.full_like(e, E8M0.min_exponent))
    return e.clamp(E8M0.min_exponent, exponent_cap(dtype, fmt))


def group_scale(amax: torch.Tensor, fmt: ElementFormat, mode: str,
                dtype: torch.dtype = torch.float32) -> Tuple[torch.Tensor, torch.Tensor]:
    """Scale (float32) and E8M0 code (uint8; all 0 for the ``float`` mode) from per-group amax.

    ``dtype`` is the dtype of the data being quantized (it caps the exponent, see module doc).
    NaN or Inf amax gives a NaN scale and code 0xFF.
    """
    amax = amax.float()
    finite = torch.isfinite(amax)
    safe = torch.where(finite, amax, torch.zeros_like(amax))
    if mode == "float":
        scale = safe / fmt.max_normal
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        codes = torch.zeros(amax.shape, dtype=torch.uint8, device=amax.device)
    else:
        e = shared_exponent(safe, fmt, mode, dtype)
        scale = exp2i(e)
        codes = (e + E8M0.bias).to(torch.uint8)
        codes = torch.where(finite, codes, torch.full_like(codes, E8M0.nan_code))
    scale = torch.where(finite, scale, torch.full_like(scale, float("nan")))
    return scale, codes


def e8m0_encode(scale: torch.Tensor) -> torch.Tensor:
    """uint8 E8M0 codes of power-of-two scales in [2**-127, 2**127]; NaN -> 0xFF.

    Raises ValueError if a finite scale is not an exact power of two in range.
    """
    scale = scale.float()
    nan = torch.isnan(scale)
    e = floor_log2(scale)
    ok = nan | ((scale > 0) & (significand(scale) == 1.0) & (e >= E8M0.min_exponent) & (e <= E8M0.max_exponent))
    if not bool(ok.all()):
        raise ValueError("e8m0_encode: scale must be NaN or a power of two in [2**-127, 2**127]")
    codes = (e + E8M0.bias).clamp(0, 254).to(torch.uint8)
    return torch.where(nan, torch.full_like(codes, E8M0.nan_code), codes)


def e8m0_decode(codes: torch.Tensor) -> torch.Tensor:
    """float32 scales 2**(code - 127) from uint8 E8M0 codes; 0xFF -> NaN."""
    if codes.dtype != torch.uint8:
        raise TypeError(f"E8M0 codes must be uint8, got {codes.dtype}")
    c = codes.to(torch.int32)
    scale = exp2i(c - E8M0.bias)
    return torch.where(c == E8M0.nan_code, torch.full_like(scale, float("nan")), scale)
