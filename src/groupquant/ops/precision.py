"""Rounding unscaled floats to a narrower IEEE-like float (bfloat16, float16, any ExMy).

This is the element-wise precision of microxcaling's ``bfloat=N`` / ``fp=N`` settings: no shared
scale, every value is rounded on its own to a float with ``exponent_bits`` and ``mantissa_bits``
(IEEE-like: bias ``2**(e-1) - 1``, the top exponent code reserved for Inf/NaN, so
``max normal = 2**bias * (2 - 2**-m)``, ``min normal = 2**(1 - bias)``).

Rules of :func:`round_to_precision` (float32 arithmetic, every step exact):
- rounding to nearest, ties to even (``rounding="even"``, IEEE, the default); ``"nearest"`` rounds
  ties away from zero (microxcaling's default ``round='nearest'``); ``"floor"`` truncates toward zero.
  A tie goes to the even multiple of its binade's quantum, which is the even mantissa code; with no
  mantissa bits (``mantissa_bits=0``) that means up in magnitude (both neighbours have significand 1).
- overflow like IEEE: a value whose rounded magnitude exceeds max normal becomes +-Inf (microxcaling's
  bfloat/fp path does the same: ``saturate_normals=False``); so max normal + half an ulp (a tie whose
  even neighbour is 2**(emax+1)) is Inf. With ``"floor"`` a finite value of magnitude >= 2**(emax+1)
  also gives Inf (as microxcaling; IEEE's round-toward-zero would give max normal). Inf and NaN pass.
- subnormals of the target are kept (``subnormals=True``); with ``subnormals=False`` they are flushed
  to a zero of the input's sign. ``flush="input"`` (microxcaling's rule) zeroes inputs whose magnitude
  is below min normal before rounding, so a value just under min normal that would round up to it
  still becomes 0; ``flush="output"`` rounds first and zeroes results below min normal.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

import torch

from .bits import exp2i, floor_log2

__all__ = ["ElementPrecision", "PrecisionLike", "PRECISION_ROUNDINGS", "FLUSH_RULES", "resolve_precision",
           "round_to_precision"]

PRECISION_ROUNDINGS = ("even", "nearest", "floor")
FLUSH_RULES = ("input", "output")

# (exponent bits, mantissa bits) each input dtype can hold; the rounding runs in float32.
_DTYPE_WIDTHS = {torch.float32: (8, 23), torch.bfloat16: (8, 7), torch.float16: (5, 10)}


@dataclass(frozen=True)
class ElementPrecision:
    """An IEEE-like float format for element-wise arithmetic: ``exponent_bits`` (2..8),
    ``mantissa_bits`` (0..23, stored bits, no implicit one), subnormals kept or flushed, and the
    rounding rule. Build one from a name with :func:`resolve_precision`."""

    exponent_bits: int
    mantissa_bits: int
    subnormals: bool = True
    rounding: str = "even"
    flush: str = "input"

    def __post_init__(self) -> None:
        for name in ("exponent_bits", "mantissa_bits"):
            if not isinstance(getattr(self, name), int) or isinstance(getattr(self, name), bool):
                raise TypeError(f"ElementPrecision.{name} must be an int, got {getattr(self, name)!r}")
        if not 2 <= self.exponent_bits <= 8:
            raise ValueError(f"ElementPrecision.exponent_bits must be in 2..8 (float32 holds 8), got {self.exponent_bits}")
        if not 0 <= self.mantissa_bits <= 23:
            raise ValueError(f"ElementPrecision.mantissa_bits must be in 0..23 (float32 holds 23), got {self.mantissa_bits}")
        if not isinstance(self.subnormals, bool):
            raise TypeError(f"ElementPrecision.subnormals must be a bool, got {self.subnormals!r}")
        if self.rounding not in PRECISION_ROUNDINGS:
            raise ValueError(f"ElementPrecision.rounding must be one of {PRECISION_ROUNDINGS}, got {self.rounding!r}")
        if self.flush not in FLUSH_RULES:
            raise ValueError(f"ElementPrecision.flush must be one of {FLUSH_RULES}, got {self.flush!r}")

    @property
    def name(self) -> str:
        """``e{E}m{M}`` plus the options that differ from the defaults."""
        extra = "" if self.subnormals else f"_ftz_{self.flush}"
        extra += "" if self.rounding == "even" else f"_{self.rounding}"
        return f"e{self.exponent_bits}m{self.mantissa_bits}{extra}"

    @property
    def bias(self) -> int:
        """Exponent bias ``2**(E-1) - 1``."""
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def emax(self) -> int:
        """Largest normal exponent (the top code is Inf/NaN)."""
        return self.bias

    @property
    def emin(self) -> int:
        """Smallest normal exponent ``1 - bias``."""
        return 1 - self.bias

    @property
    def max_normal(self) -> float:
        """``2**emax * (2 - 2**-M)``."""
        return 2.0 ** self.emax * (2.0 - 2.0 ** -self.mantissa_bits)

    @property
    def min_normal(self) -> float:
        """``2**emin``."""
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float:
        """``2**(emin - M)``."""
        return 2.0 ** (self.emin - self.mantissa_bits)

    def fits(self, dtype: torch.dtype) -> bool:
        """Whether every value of this precision is a value of ``dtype`` (float32, bfloat16, float16)."""
        widths = _DTYPE_WIDTHS.get(dtype)
        return widths is not None and self.exponent_bits <= widths[0] and self.mantissa_bits <= widths[1]

    @classmethod
    def from_mx_specs(cls, bfloat: int = 0, fp: int = 0, bfloat_subnorms: bool = True,
                      round: str = "nearest") -> "ElementPrecision | None":
        """microxcaling's element-wise settings: ``bfloat=N`` -> e8m(N-9) (N >= 10), ``fp=N`` ->
        e5m(N-6) (N >= 7); both 0 -> None (no rounding). Subnormals are flushed on the input, as there."""
        if bfloat and fp:
            raise ValueError(f"mx_specs: set only one of bfloat ({bfloat}) and fp ({fp})")
        if bfloat:
            if not 10 <= bfloat <= 32:
                raise ValueError(f"mx_specs bfloat must be 0 or in 10..32, got {bfloat}")
            return cls(8, bfloat - 9, bfloat_subnorms, round)
        if fp:
            if not 7 <= fp <= 29:
                raise ValueError(f"mx_specs fp must be 0 or in 7..29, got {fp}")
            return cls(5, fp - 6, bfloat_subnorms, round)
        return None


PrecisionLike = Union[ElementPrecision, str]

_NAMED = {"bfloat16": (8, 7), "bf16": (8, 7), "fp16": (5, 10), "float16": (5, 10), "half": (5, 10),
          "tf32": (8, 10), "fp32": (8, 23), "float32": (8, 23)}
_PATTERNS = ((re.compile(r"e(\d+)m(\d+)"), lambda a, b: (a, b)),
             (re.compile(r"bfloat(\d+)"), lambda n: (8, n - 9)),
             (re.compile(r"fp(\d+)"), lambda n: (5, n - 6)))


def resolve_precision(precision: PrecisionLike) -> ElementPrecision:
    """An :class:`ElementPrecision` from itself or a name: ``bfloat16``/``bf16`` (e8m7),
    ``fp16``/``float16``/``half`` (e5m10), ``tf32`` (e8m10), ``fp32``/``float32`` (e8m23),
    ``eXmY``, microxcaling's ``bfloatN`` (e8m(N-9)) and ``fpN`` (e5m(N-6))."""
    if isinstance(precision, ElementPrecision):
        return precision
    if not isinstance(precision, str):
        raise TypeError(f"precision must be an ElementPrecision or a name, got {precision!r}")
    key = precision.strip().lower()
    if key in _NAMED:
        return ElementPrecision(*_NAMED[key])
    for pattern, widths in _PATTERNS:
        match = pattern.fullmatch(key)
        if match:
            return ElementPrecision(*widths(*(int(g) for g in match.groups())))
    raise ValueError(f"unknown precision {precision!r}; use bfloat16, fp16, tf32, fp32, eXmY, bfloatN or fpN")


def _check_input(x: torch.Tensor, p: ElementPrecision) -> None:
    """TypeError for a non-float or unsupported dtype; ValueError when ``p`` is wider than the dtype."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"round_to_precision needs a tensor, got {type(x).__name__}")
    if x.dtype not in _DTYPE_WIDTHS:
        raise TypeError(f"round_to_precision works on float32, bfloat16 or float16 tensors, got {x.dtype} "
                        f"(precision {p.name})")
    if not p.fits(x.dtype):
        raise ValueError(f"precision {p.name} is not representable in {x.dtype} (exponent_bits="
                         f"{p.exponent_bits}, mantissa_bits={p.mantissa_bits}); use a wider input dtype")


def _round_integers(y: torch.Tensor, rounding: str) -> torch.Tensor:
    """``y`` (float32, |y| < 2**24) rounded to an integer by ``rounding``, sign kept, exact."""
    if rounding == "even":
        return torch.round(y)
    if rounding == "floor":
        return torch.trunc(y)
    a = y.abs()
    whole = torch.floor(a)
    up = (a - whole) >= 0.5
    return torch.copysign(whole + up.to(a.dtype), y)


def _scale(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``x * 2**k`` for int32 ``k`` in [-298, 298], exact while the result is on float32's grid:
    two power-of-two factors of the same sign, so neither overflows nor loses bits on the way."""
    half = torch.div(k, 2, rounding_mode="floor")
    return x * exp2i(half) * exp2i(k - half)


def _flush(v: torch.Tensor, min_normal: float) -> torch.Tensor:
    """Values with magnitude below ``min_normal`` -> zero of their sign."""
    return torch.where(v.abs() < min_normal, v * 0.0, v)


def round_to_precision(x: torch.Tensor, precision: PrecisionLike) -> torch.Tensor:
    """``x`` rounded element-wise to ``precision`` (see the module notes), in x's dtype.

    float32, bfloat16 and float16 inputs; the precision must fit the dtype (e9m7 does not fit
    float32, e5m10 does not fit bfloat16), else ValueError naming it.
    """
    p = resolve_precision(precision)
    _check_input(x, p)
    v = x.float()
    if not p.subnormals and p.flush == "input":
        v = _flush(v, p.min_normal)
    quantum = floor_log2(v).clamp(min=p.emin, max=127) - p.mantissa_bits
    out = _scale(_round_integers(_scale(v, -quantum), p.rounding), quantum)
    out = torch.where(out.abs() > p.max_normal, torch.copysign(torch.full_like(out, float("inf")), out), out)
    if not p.subnormals and p.flush == "output":
        out = _flush(out, p.min_normal)
    return out.to(x.dtype)
