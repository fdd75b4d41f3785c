"""Rounding scaled values onto an element format's grid, with saturation.

Input is float32 already divided by the shared scale. Every step is exact in float32 (products
by powers of two, trunc/round, fraction comparisons), so the CPU/CUDA kernels, which perform
the same steps, agree bit for bit.

Rounding modes (``rounding=``):
- ``even``: to nearest, ties to even (IEEE default; OCP MX).
- ``nearest``: to nearest, ties away from zero.
- ``floor``: toward zero (truncation of the magnitude).
- ``stochastic``: up with probability equal to the fraction, from a counter-based hash of
  (seed, element index), so any backend reproduces it from the same seed.
Values beyond max normal saturate to +-max normal (``saturating=True``, the OCP MX rule); with
``saturating=False`` the value is rounded as if the exponent range had no top and a result
beyond max normal becomes +-Inf (formats with Inf) or NaN (formats with NaN only, FNUZ); formats
with neither cannot be non-saturating. NaN stays NaN. Formats without a negative
zero (integers, unsigned, FNUZ) give +0 where the rounding of a negative value reaches zero, so
fake-quant output equals the decoded codes bit for bit.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..formats import ElementFormat, FloatFormat, IntFormat, SpecialValues
from .bits import exp2i, floor_log2

__all__ = ["ROUNDING_MODES", "round_to_format", "uniform_from_hash", "check_saturating"]

ROUNDING_MODES = ("even", "nearest", "floor", "stochastic")

_MASK32 = 0xFFFFFFFF


def uniform_from_hash(index: torch.Tensor, seed: int) -> torch.Tensor:
    """Uniform float32 in [0, 1) on the grid k * 2**-24, a pure function of (index, seed).

    32-bit murmur3 finalizer of ``index * 0x9E3779B9 + seed`` (mod 2**32); the top 24 bits
    become the fraction. ``index`` is int64 (the element's linear index in the input tensor).
    """
    h = (index * 0x9E3779B9 + (int(seed) & _MASK32)) & _MASK32
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    h = h ^ (h >> 16)
    return (h >> 8).to(torch.float32) * (2.0 ** -24)


def _round_magnitude(y: torch.Tensor, rounding: str, noise: Optional[torch.Tensor]) -> torch.Tensor:
    """Round y (float32, integer grid) to an integer by ``rounding``; keeps the sign, exact."""
    if rounding == "even":
        return torch.round(y)
    a = y.abs()
    whole = torch.floor(a)
    frac = a - whole  # exact
    if rounding == "nearest":
        up = frac >= 0.5
    elif rounding == "floor":
        return torch.trunc(y)
    elif rounding == "stochastic":
        if noise is None:
            raise ValueError("rounding='stochastic' needs random numbers (noise)")
        up = noise < frac
    else:
        raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {rounding!r}")
    return torch.copysign(whole + up.to(whole.dtype), y)


def check_saturating(saturating: object, fmt: ElementFormat) -> bool:
    """``saturating`` validated for ``fmt``: TypeError unless a bool; ValueError for ``False`` on a
    format with no Inf or NaN code (integers, FP6, FP4, ``special_values='none'``)."""
    if not isinstance(saturating, bool):
        raise TypeError(f"saturating must be a bool, got {saturating!r}")
    if not saturating and not fmt.has_nan:
        raise ValueError(f"saturating=False needs a format with Inf or NaN codes; {fmt.name} has none, so its "
                         "out-of-range values can only saturate (use saturating=True)")
    return saturating


def round_to_format(x: torch.Tensor, fmt: ElementFormat, rounding: str = "even",
                    noise: Optional[torch.Tensor] = None, saturating: bool = True) -> torch.Tensor:
    """Round float32 ``x`` onto ``fmt``'s value grid and saturate to its range (float32 out).

    ``noise`` (uniform [0, 1), x's shape) is required for ``rounding='stochastic'``. With
    ``saturating=False`` a rounded magnitude beyond max normal gives +-Inf (formats with Inf) or
    NaN (see :func:`check_saturating`).
    """
    check_saturating(saturating, fmt)
    x = x.float()
    if isinstance(fmt, IntFormat):
        y = x * float(2 ** fmt.frac_bits)
        n = _round_magnitude(y, rounding, noise).clamp(fmt.qmin, fmt.qmax)
        return _positive_zero(n * (2.0 ** -fmt.frac_bits))
    e = floor_log2(x).clamp(min=fmt.emin)
    quantum_exp = e - fmt.mantissa_bit_width
    y = x * exp2i(-quantum_exp)
    v = _round_magnitude(y, rounding, noise) * exp2i(quantum_exp)
    v = _saturate(v, fmt) if saturating else _overflow(v, fmt)
    return v if fmt.has_negative_zero else _positive_zero(v)


def _saturate(v: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Clamp rounded values to [-max normal, max normal] (unsigned: [0, max normal])."""
    low = 0.0 if not fmt.signed else -fmt.max_normal
    return v.clamp(low, fmt.max_normal)


def _overflow(v: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Rounded values beyond max normal -> +-Inf (formats with Inf) or NaN; unsigned: negatives -> 0."""
    if not fmt.signed:
        v = v.clamp(min=0.0)
    over = torch.full_like(v, float("inf") if fmt.has_inf else float("nan"))
    return torch.where(v.abs() > fmt.max_normal, torch.copysign(over, v), v)


def _positive_zero(v: torch.Tensor) -> torch.Tensor:
    """-0 -> +0 (other values, NaN included, unchanged): for formats with no negative zero."""
    return torch.where(v == 0, torch.zeros_like(v), v)
