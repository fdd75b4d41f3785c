"""Scale formats: the number format a block's shared scale is stored in.

Two families, told apart by :attr:`is_power_of_two`:

- :class:`ExponentScale` ``E{k}M0``: an unsigned k-bit exponent, bias ``2**(k-1) - 1``; code ``c``
  is ``2**(c - bias)`` for ``c < 2**k - 1`` and the all-ones code is NaN. ``E8M0`` (k = 8) is the
  OCP MX scale (2**-127 .. 2**127); narrower ones are microxcaling's ``scale_bits`` (the shared
  exponent is clamped to ``[-bias, bias]``). The power-of-two scale rules (floor, ceil, even,
  rceil) produce these.
- :class:`FloatScale`: any positive float32 value (``float32``, today's ``scale_mode='float'``),
  a bfloat16 value (``bfloat16``, round to nearest even), or an unsigned minifloat such as
  ``ue4m3`` (the NVFP4 block scale: FP8 E4M3 with its sign bit always 0, max 448, code 0x7F NaN).
  The ``float`` rule (``amax / max_normal``) produces these. A minifloat scale is clamped to its
  normal range ``[min_normal, max_normal]`` before rounding (nearest even), as NVFP4 clamps to
  ``[2**-6, 448]``; float32 / bfloat16 scales are clamped to the format's max, and a zero scale
  (an all-zero block) becomes 1.

Minifloat scales may take a second, per-tensor float32 scale (two-level scaling, NVFP4): see
:mod:`groupquant.ops.shared_scale`.
"""
from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

import torch

from .element import FloatFormat, SpecialValues

__all__ = ["ScaleKind", "ExponentScale", "FloatScale", "ScaleFormat", "E8M0", "UE4M3", "FLOAT32_SCALE",
           "get_scale_format", "known_scale_formats"]


class ScaleKind(enum.IntEnum):
    """How a scale value is stored; the values are the kernels' numbering (csrc ``ScaleKind``)."""

    EXPONENT = 0   # E{k}M0: a power of two
    FLOAT32 = 1    # any positive float32
    BFLOAT16 = 2   # float32 rounded to bfloat16 (nearest even)
    MINIFLOAT = 3  # an unsigned minifloat (ue4m3, ...), clamped to its normal range


@dataclass(frozen=True)
class ExponentScale:
    """``E{bits}M0``: a power-of-two scale stored as an unsigned exponent (E8M0 for bits = 8)."""

    bits: int = 8
    name: str = field(default="", compare=False)

    kind = ScaleKind.EXPONENT
    is_power_of_two = True
    is_coded = True  # stored as one code byte per scale

    def __post_init__(self) -> None:
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 2 <= self.bits <= 8:
            raise ValueError(f"scale_format: an exponent scale E{{k}}M0 needs k in [2, 8], got k={self.bits!r}")
        if not self.name:
            object.__setattr__(self, "name", f"e{self.bits}m0")

    @property
    def bit_width(self) -> int:
        """Storage bits per scale."""
        return self.bits

    @property
    def bias(self) -> int:
        """Exponent bias, 2**(bits-1) - 1 (127 for E8M0)."""
        return 2 ** (self.bits - 1) - 1

    @property
    def min_exponent(self) -> int:
        """Smallest exponent, -bias (code 0; an all-zero block gets it)."""
        return -self.bias

    @property
    def max_exponent(self) -> int:
        """Largest exponent, +bias (code 2**bits - 2)."""
        return self.bias

    @property
    def nan_code(self) -> int:
        """The all-ones code, NaN (0xFF for E8M0)."""
        return 2 ** self.bits - 1

    @property
    def min_value(self) -> float:
        """Smallest scale, 2**-bias."""
        return math.ldexp(1.0, self.min_exponent)

    @property
    def max_value(self) -> float:
        """Largest scale, 2**bias."""
        return math.ldexp(1.0, self.max_exponent)

    def describe(self) -> Dict[str, object]:
        """Settings and derived constants as a flat dict."""
        return {"name": self.name, "kind": "exponent", "bit_width": self.bits, "bias": self.bias,
                "min": f"2^{self.min_exponent}", "max": f"2^{self.max_exponent}", "nan_code": self.nan_code}


@dataclass(frozen=True)
class FloatScale:
    """A float-valued scale: float32, bfloat16, or an unsigned minifloat (``element``).

    ``FloatScale(ScaleKind.MINIFLOAT, FloatFormat(4, 3, SpecialValues.NAN_ONLY, signed=False))`` is
    NVFP4's UE4M3; the minifloat must be unsigned, at most 8 bits, with a NaN code (a block holding
    NaN or Inf stores it).
    """

    kind: ScaleKind
    element: Optional[FloatFormat] = None
    name: str = field(default="", compare=False)

    is_power_of_two = False

    def __post_init__(self) -> None:
        kind = ScaleKind(self.kind)
        object.__setattr__(self, "kind", kind)
        if kind is ScaleKind.EXPONENT:
            raise ValueError("scale_format: use ExponentScale for E{k}M0 scales")
        if kind is ScaleKind.MINIFLOAT:
            el = self.element
            if not isinstance(el, FloatFormat):
                raise ValueError("scale_format: a minifloat scale needs element=FloatFormat(...)")
            if el.signed:
                raise ValueError(f"scale_format: a minifloat scale is unsigned (signed=False), got {el.name}")
            if el.bit_width > 8:
                raise ValueError(f"scale_format: a minifloat scale has at most 8 bits, got {el.bit_width} ({el.name})")
            if el.nan_code is None:
                raise ValueError(
                    f"scale_format {el.name} has no NaN code; a block holding NaN or Inf needs one "
                    "(use special_values='nan_only', as UE4M3 does)")
            if el.exponent_bit_width < 2:
                raise ValueError(f"scale_format: a minifloat scale needs at least 2 exponent bits, got {el.name}")
        elif self.element is not None:
            raise ValueError(f"scale_format: {kind.name.lower()} scales take no element format")
        if not self.name:
            default = {ScaleKind.FLOAT32: "float32", ScaleKind.BFLOAT16: "bfloat16"}.get(kind)
            object.__setattr__(self, "name", default or f"ue{self.element.exponent_bit_width}m{self.element.mantissa_bit_width}")

    @property
    def bit_width(self) -> int:
        """Storage bits per scale: 32, 16, or one byte for a minifloat (UE4M3 is FP8 E4M3 with sign bit 0)."""
        return {ScaleKind.FLOAT32: 32, ScaleKind.BFLOAT16: 16}.get(self.kind, 8)

    @property
    def is_coded(self) -> bool:
        """True for minifloats (one code byte per scale), False for float32 / bfloat16 (stored as values)."""
        return self.kind is ScaleKind.MINIFLOAT

    @property
    def min_value(self) -> float:
        """Lower clamp of a scale: the minifloat's min normal; 0 for float32 / bfloat16 (0 -> 1)."""
        return self.element.min_normal if self.kind is ScaleKind.MINIFLOAT else 0.0

    @property
    def max_value(self) -> float:
        """Largest scale (upper clamp)."""
        if self.kind is ScaleKind.MINIFLOAT:
            return self.element.max_normal
        return float(torch.finfo(torch.float32 if self.kind is ScaleKind.FLOAT32 else torch.bfloat16).max)

    @property
    def nan_code(self) -> Optional[int]:
        """Code of a NaN scale (minifloats; None for float32 / bfloat16, stored as values)."""
        return self.element.nan_code if self.kind is ScaleKind.MINIFLOAT else None

    def describe(self) -> Dict[str, object]:
        """Settings and derived constants as a flat dict."""
        out: Dict[str, object] = {"name": self.name, "kind": self.kind.name.lower(), "bit_width": self.bit_width,
                                  "min": self.min_value, "max": self.max_value}
        if self.kind is ScaleKind.MINIFLOAT:
            out.update(bias=self.element.bias, nan_code=self.nan_code)
        return out


ScaleFormat = Union[ExponentScale, FloatScale]

E8M0 = ExponentScale(8)
UE4M3 = FloatScale(ScaleKind.MINIFLOAT, FloatFormat(4, 3, SpecialValues.NAN_ONLY, signed=False, name="ue4m3"))
FLOAT32_SCALE = FloatScale(ScaleKind.FLOAT32)
BFLOAT16_SCALE = FloatScale(ScaleKind.BFLOAT16)

_NAMED: Dict[str, ScaleFormat] = {"e8m0": E8M0, "ue4m3": UE4M3, "float32": FLOAT32_SCALE, "fp32": FLOAT32_SCALE,
                                  "float": FLOAT32_SCALE, "bfloat16": BFLOAT16_SCALE, "bf16": BFLOAT16_SCALE}


def known_scale_formats() -> List[str]:
    """Scale format names :func:`get_scale_format` accepts (plus any ``e{k}m0``, ``ue{e}m{m}``)."""
    return sorted(_NAMED) + ["e{k}m0 (k = 2..8)", "ue{e}m{m} (unsigned minifloat, NaN-only, <= 8 bits)"]


def get_scale_format(fmt: Union[str, ScaleFormat]) -> ScaleFormat:
    """Resolve a scale format name (``'e8m0'``, ``'e5m0'``, ``'ue4m3'``, ``'float32'``, ``'bfloat16'``) or pass one through.

    ``ue{e}m{m}`` is the unsigned minifloat with ``e`` exponent and ``m`` mantissa bits whose all-ones
    code is NaN (as UE4M3). ValueError naming ``scale_format`` for anything else.
    """
    if isinstance(fmt, (ExponentScale, FloatScale)):
        return fmt
    if not isinstance(fmt, str):
        raise TypeError(f"scale_format must be a scale format name or an ExponentScale/FloatScale, got {type(fmt).__name__}")
    key = fmt.strip().lower()
    if key in _NAMED:
        return _NAMED[key]
    exp = re.fullmatch(r"e(\d+)m0", key)
    if exp:
        return ExponentScale(int(exp.group(1)))
    mini = re.fullmatch(r"ue(\d+)m(\d+)", key)
    if mini:
        element = FloatFormat(int(mini.group(1)), int(mini.group(2)), SpecialValues.NAN_ONLY, signed=False, name=key)
        return FloatScale(ScaleKind.MINIFLOAT, element, name=key)
    raise ValueError(f"unknown scale_format {fmt!r}; known: {', '.join(known_scale_formats())}")
