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
from typing import Dict, List, Optional, Tuple, Union

import torch

from .bits import exp2i, float_log2_floor, floor_log2, significand
from .element import ElementFormat, FloatFormat, SpecialValues

__all__ = ["ScaleKind", "ExponentScale", "FloatScale", "ScaleFormat", "E8M0", "UE4M3", "FLOAT32_SCALE",
           "get_scale_format", "known_scale_formats", "POWER_OF_TWO_RULES", "FLOAT_RULES", "REFERENCE_RULES",
           "SCALE_RULES", "E8M0_DTYPE"]

#: The power-of-two scale rules (exponent formats), see :meth:`ExponentScale.shared_exponent`.
POWER_OF_TWO_RULES = ("floor", "ceil", "even", "rceil")
#: The float scale rule (float-valued formats): ``amax / max_normal``, see :meth:`FloatScale.block_scale`.
FLOAT_RULES = ("float",)
#: Power-of-two rules only the PyTorch reference computes (the native kernels refuse them by name):
#: ``float_log2``, microxcaling's block exponent ``floor(torch.log2(amax))`` in the input's dtype.
REFERENCE_RULES = ("float_log2",)
#: Every scale rule, in the kernels' numbering (csrc ``ScaleMode``; the reference rules come last).
SCALE_RULES = POWER_OF_TWO_RULES + FLOAT_RULES + REFERENCE_RULES

#: dtype of stored E8M0 scale bytes (torch.float8_e8m0fnu where this torch has it, else uint8: same bytes).
E8M0_DTYPE: torch.dtype = getattr(torch, "float8_e8m0fnu", torch.uint8)


def _dtype_emax(dtype: torch.dtype) -> int:
    """floor(log2(largest finite value of ``dtype``)): 127 for float32 / bfloat16, 15 for float16."""
    return math.frexp(torch.finfo(dtype).max)[1] - 1


def _round_significand_carry(amax: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """1 where rounding amax's significand to ``mantissa_bits`` (nearest-even) carries into 2.0, else 0."""
    sig = significand(amax)  # [1, 2)
    steps = torch.round(sig * float(2 ** mantissa_bits))  # exact product, RNE
    return (steps >= 2 ** (mantissa_bits + 1)).to(torch.int32)


class ScaleKind(enum.IntEnum):
    """How a scale value is stored; the values are the kernels' numbering (csrc ``ScaleKind``)."""

    EXPONENT = 0   # E{k}M0: a power of two
    FLOAT32 = 1    # any positive float32
    BFLOAT16 = 2   # float32 rounded to bfloat16 (nearest even)
    MINIFLOAT = 3  # an unsigned minifloat (ue4m3, ...), clamped to its normal range


_F32_MIN_NORMAL = 2.0 ** -126


@dataclass(frozen=True)
class ExponentScale:
    """``E{bits}M0``: a power-of-two scale stored as an unsigned exponent (E8M0 for bits = 8).

    ``saturating`` (default True): a block whose shared exponent would exceed +bias gets the top
    scale ``2**bias`` (its elements saturate). False: such a block's scale is NaN (the NaN code)
    and so are its elements, as microxcaling's ``scale_bits`` defines it.

    ``flush_subnormal_blocks`` (default False): a block whose amax is a float32 subnormal (nonzero,
    below ``2**-126``) is quantized as an all-zero block: scale ``2**-bias`` (code 0), elements
    zero keeping their sign (microxcaling's ``mx_flush_fp32_subnorms``)."""

    bits: int = 8
    name: str = field(default="", compare=False)
    saturating: bool = True
    flush_subnormal_blocks: bool = False

    kind = ScaleKind.EXPONENT
    is_power_of_two = True
    is_coded = True  # stored as one code byte per scale

    def __post_init__(self) -> None:
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 2 <= self.bits <= 8:
            raise ValueError(f"scale_format{' ' + repr(self.name) if self.name else ''}: an exponent scale E{{k}}M0 "
                             f"needs k in [2, 8], got k={self.bits!r}")
        for flag in ("saturating", "flush_subnormal_blocks"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"scale_format {self.name or f'e{self.bits}m0'!r}: {flag} must be True or False, "
                                 f"got {getattr(self, flag)!r}")
        if not self.name:
            object.__setattr__(self, "name", f"e{self.bits}m0" + ("" if self.saturating else "_nan_above")
                               + ("_flush_subnormal" if self.flush_subnormal_blocks else ""))

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

    # ---- behaviour ------------------------------------------------------------------------------

    rules = POWER_OF_TWO_RULES + REFERENCE_RULES
    default_rule = "floor"
    takes_tensor_scale = False  # the exponent range (2**-127 .. 2**127 for E8M0) needs no second scale

    @property
    def any_scale_source(self) -> bool:
        """Whether scales from every source (running statistics, learned, MSE) can be stored: E8M0
        only; narrower exponent formats take abs-max scales from each tensor."""
        return self.bits == 8

    @property
    def storage_dtype(self) -> torch.dtype:
        """dtype of stored scales: :data:`E8M0_DTYPE` for E8M0, ``uint8`` exponent codes for narrower ones."""
        return E8M0_DTYPE if self.bits == 8 else torch.uint8

    @property
    def onnx_type(self) -> Optional[str]:
        """Name of the ONNX ``TensorProto`` type holding exactly these scales: ``FLOAT8E8M0`` for E8M0,
        None for narrower exponent formats (exported as float32 values)."""
        return "FLOAT8E8M0" if self.bits == 8 else None

    def kept_codes(self, codes: torch.Tensor) -> Optional[torch.Tensor]:
        """What a quantized tensor keeps of the op's scale codes: all of them (one byte per scale)."""
        return codes

    def exponent_cap(self, dtype: torch.dtype, fmt: ElementFormat, rule: str = "floor") -> int:
        """Largest shared exponent for input of ``dtype``: floor(log2(dtype max)) - emax, at most +bias
        (one more for ``float_log2``, whose log2 of the dtype's top values rounds up to the next binade)."""
        top = _dtype_emax(dtype) + (1 if rule == "float_log2" else 0)
        return min(self.max_exponent, top - fmt.emax)

    def shared_exponent(self, amax: torch.Tensor, fmt: ElementFormat, rule: str,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The shared exponent (int32) of finite, non-negative ``amax`` by ``rule`` (OCP MX v1.0 floor,
        ceil, even, rceil from exponent bits; float_log2 from a float log2; see
        :mod:`groupquant.ops.shared_scale`), clamped to [-bias, :meth:`exponent_cap`]; zero amax gives -bias."""
        low = self.min_exponent
        e = torch.where(self.keeps(amax, rule, dtype), self._rule_exponent(amax.float(), fmt, rule, dtype),
                        torch.full_like(amax, low, dtype=torch.int32))
        return e.clamp(low, self.exponent_cap(dtype, fmt, rule))

    def keeps(self, amax: torch.Tensor, rule: str = "floor", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Which blocks (by their amax) are quantized as they are: amax > 0, and with
        ``flush_subnormal_blocks`` at least float32's min normal (the others are all-zero blocks);
        under ``float_log2``, a float log2 of at least -126 (microxcaling's test of its exponent)."""
        if not self.flush_subnormal_blocks:
            return amax > 0
        if rule == "float_log2":
            return (amax > 0) & (float_log2_floor(amax, dtype) >= -126)
        return amax.float() >= _F32_MIN_NORMAL

    @staticmethod
    def _rule_exponent(amax: torch.Tensor, fmt: ElementFormat, rule: str,
                       dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The shared exponent (int32) of positive float32 ``amax`` (of input ``dtype``) by ``rule``,
        before any clamp."""
        if rule == "float_log2":
            return float_log2_floor(amax, dtype) - fmt.emax
        e_a = floor_log2(amax)
        if rule == "floor":
            e = e_a - fmt.emax
        elif rule == "ceil":
            e = e_a + (significand(amax) > 1.0).to(torch.int32) - fmt.emax
        elif rule == "even":
            e = e_a + _round_significand_carry(amax, fmt.mantissa_bit_width) - fmt.emax
        elif rule == "rceil":
            m_max, e_max = math.frexp(fmt.max_normal)
            e = e_a - (e_max - 1) + (significand(amax) > 2.0 * m_max).to(torch.int32)
        else:
            raise ValueError(f"scale_mode must be one of {POWER_OF_TWO_RULES + REFERENCE_RULES} here, got {rule!r}")
        return e

    def block_scale(self, amax: torch.Tensor, fmt: ElementFormat, rule: str, dtype: torch.dtype,
                    tensor_scale: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """(float32 scale ``2**e``, uint8 code ``e + bias``) of finite float32 ``amax`` per block;
        not ``saturating``: NaN and the NaN code where the rule's exponent exceeds +bias."""
        e = self.shared_exponent(amax, fmt, rule, dtype)
        scale, codes = exp2i(e), (e + self.bias).to(torch.uint8)
        if self.saturating:
            return scale, codes
        above = self._rule_exponent(amax.float(), fmt, rule, dtype) > self.max_exponent
        over = self.keeps(amax, rule, dtype) & above
        return (torch.where(over, torch.full_like(scale, float("nan")), scale),
                torch.where(over, torch.full_like(codes, self.nan_code), codes))

    def encode(self, scale: torch.Tensor) -> torch.Tensor:
        """uint8 codes of powers of two in [2**-bias, 2**bias] (NaN -> the NaN code); ValueError otherwise."""
        scale = scale.float()
        nan = torch.isnan(scale)
        e = floor_log2(scale)
        ok = nan | ((scale > 0) & (significand(scale) == 1.0) & (e >= self.min_exponent) & (e <= self.max_exponent))
        if not bool(ok.all()):
            raise ValueError(f"encode_scale: a scale is not a {self.name} value (NaN or a power of two in "
                             f"[2**-{self.bias}, 2**{self.bias}])")
        codes = (e + self.bias).clamp(0, 255).to(torch.uint8)
        return torch.where(nan, torch.full_like(codes, self.nan_code), codes)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """float32 ``2**(c - bias)`` of integer codes; the NaN code and codes above it give NaN."""
        c = codes.to(torch.int32)
        values = exp2i((c - self.bias).clamp(-149, 127))
        return torch.where(c >= self.nan_code, torch.full_like(values, float("nan")), values)

    def kernel_fields(self, dtype: torch.dtype, fmt: ElementFormat, tensor_scale: bool) -> Dict[str, object]:
        """The scale part of the native ops' record (``ops.kernel_params``), plus ``exp_max``."""
        return dict(scale_kind=int(ScaleKind.EXPONENT), scale_bias=self.bias, scale_mantissa_bits=0,
                    scale_min=float(self.min_value), scale_max=float(self.max_value), scale_nan_code=self.nan_code,
                    tensor_scale=False, scale_overflow_nan=not self.saturating,
                    scale_flush_subnormal=self.flush_subnormal_blocks, exp_max=self.exponent_cap(dtype, fmt))

    def record(self) -> Dict[str, object]:
        """The settings as a plain dict (packed files): ``kind``, ``name``, ``bits``."""
        record: Dict[str, object] = {"kind": "exponent", "name": self.name, "bits": self.bits}
        if not self.saturating:
            record["saturating"] = False
        if self.flush_subnormal_blocks:
            record["flush_subnormal_blocks"] = True
        return record

    def describe(self) -> Dict[str, object]:
        """Settings and derived constants as a flat dict."""
        return {"name": self.name, "kind": "exponent", "bit_width": self.bits, "bias": self.bias,
                "min": f"2^{self.min_exponent}", "max": f"2^{self.max_exponent}", "nan_code": self.nan_code,
                "above_max": "saturate" if self.saturating else "NaN",
                "subnormal_blocks": "zero" if self.flush_subnormal_blocks else "kept"}


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

    # ---- behaviour ------------------------------------------------------------------------------

    rules = FLOAT_RULES
    default_rule = "float"

    @property
    def any_scale_source(self) -> bool:
        """Whether scales from every source (running statistics, learned) can be stored: float32
        only; bfloat16 and minifloat scales take abs-max scales from each tensor."""
        return self.kind is ScaleKind.FLOAT32

    @property
    def takes_tensor_scale(self) -> bool:
        """Whether a per-tensor float32 second scale may extend the range (minifloats: NVFP4)."""
        return self.kind is ScaleKind.MINIFLOAT

    @property
    def storage_dtype(self) -> torch.dtype:
        """dtype of stored scales: float32 / bfloat16 values; minifloat bytes as ``torch.float8_e4m3fn``
        when they are FP8 E4M3's with sign bit 0 (UE4M3: same bytes, 0x7F NaN in both), else ``uint8``."""
        if self.kind is ScaleKind.FLOAT32:
            return torch.float32
        if self.kind is ScaleKind.BFLOAT16:
            return torch.bfloat16
        el = self.element
        if (el.exponent_bit_width, el.mantissa_bit_width, el.special_values, el.bias) == (4, 3, SpecialValues.NAN_ONLY, 7):
            return getattr(torch, "float8_e4m3fn", torch.uint8)
        return torch.uint8

    @property
    def onnx_type(self) -> Optional[str]:
        """Name of the ONNX ``TensorProto`` type holding exactly these scales: ``FLOAT``, ``BFLOAT16``,
        ``FLOAT8E4M3FN`` for UE4M3 (its bytes with sign bit 0); None for other minifloats (rounded
        onto their grid in float32 by the exporter)."""
        if self.kind is ScaleKind.FLOAT32:
            return "FLOAT"
        if self.kind is ScaleKind.BFLOAT16:
            return "BFLOAT16"
        return "FLOAT8E4M3FN" if self.storage_dtype == getattr(torch, "float8_e4m3fn", None) else None

    def kept_codes(self, codes: torch.Tensor) -> Optional[torch.Tensor]:
        """What a quantized tensor keeps of the op's scale codes: a minifloat's bytes; None for
        float32 / bfloat16 (stored as values)."""
        return codes if self.is_coded else None

    def _round(self, s: torch.Tensor) -> torch.Tensor:
        """float32 ``s`` within [min_value, max_value] rounded onto the format, nearest even
        (identity for float32). A minifloat scale is a normal value of its element format here, so
        it is ``round(s / 2**(e - m)) * 2**(e - m)`` with ``e = floor(log2(s))``, exact in float32."""
        if self.kind is ScaleKind.BFLOAT16:
            return s.to(torch.bfloat16).float()
        if self.kind is ScaleKind.FLOAT32:
            return s
        step = exp2i(floor_log2(s) - self.element.mantissa_bit_width)
        return torch.round(s / step) * step

    def _codes_of(self, s: torch.Tensor) -> torch.Tensor:
        """uint8 minifloat codes of normal values ``s`` of the element format."""
        el = self.element
        m = el.mantissa_bit_width
        e = floor_log2(s)
        mantissa = (s * exp2i(m - e)).to(torch.int32) - (1 << m)  # exact: s is on the grid
        return (((e + el.bias) << m) | mantissa).to(torch.uint8)

    def block_scale(self, amax: torch.Tensor, fmt: ElementFormat, rule: str, dtype: torch.dtype,
                    tensor_scale: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """(float32 scale, uint8 code; zeros unless minifloat) of finite float32 ``amax`` per block:
        ``round_sf(clamp((amax / max_normal) / g, min_sf, max_sf))``, 1 where that is 0 (an all-zero
        block), ``g`` the finite per-tensor scale or None. ``rule`` is ``float``; ``dtype`` is unused."""
        raw = amax / fmt.max_normal
        if tensor_scale is not None:
            raw = raw / tensor_scale
        s = self._round(raw.clamp(self.min_value, self.max_value))
        s = torch.where(s > 0, s, torch.ones_like(s))
        if self.kind is ScaleKind.MINIFLOAT:
            return s, self._codes_of(s)
        return s, torch.zeros(s.shape, dtype=torch.uint8, device=s.device)

    def encode(self, scale: torch.Tensor) -> Optional[torch.Tensor]:
        """uint8 codes of minifloat scales (NaN -> the NaN code; ValueError for a value the format
        lacks); None for float32 / bfloat16, stored as values."""
        if not self.is_coded:
            return None
        scale = scale.float()
        nan = torch.isnan(scale)
        el = self.element
        inside = (scale >= el.min_normal) & (scale <= el.max_normal)
        safe = torch.where(inside, scale, torch.full_like(scale, el.min_normal))
        if not bool((nan | (inside & (self._round(safe) == scale))).all()):
            raise ValueError(f"encode_scale: a scale is not a {self.name} value (or NaN)")
        return torch.where(nan, torch.full_like(scale, self.nan_code, dtype=torch.uint8), self._codes_of(safe))

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """float32 values of integer minifloat ``codes``: the NaN code and codes beyond the format's
        width (UE4M3 bytes with the sign bit set) give NaN. ValueError for float32 / bfloat16."""
        if not self.is_coded:
            raise ValueError(f"scale_format {self.name} is stored as values, not codes")
        el = self.element
        m = el.mantissa_bit_width
        c = codes.to(torch.int32)
        bad = (c < 0) | (c >= (1 << el.bit_width)) | (c == el.nan_code)
        c = torch.where(bad, torch.zeros_like(c), c)
        field_e, field_m = c >> m, c & ((1 << m) - 1)
        normal = field_e > 0
        units = torch.where(normal, field_m + (1 << m), field_m).to(torch.float32)
        values = units * exp2i(torch.where(normal, field_e - el.bias, torch.full_like(c, el.emin)) - m)
        return torch.where(bad, torch.full_like(values, float("nan")), values)

    def kernel_fields(self, dtype: torch.dtype, fmt: ElementFormat, tensor_scale: bool) -> Dict[str, object]:
        """The scale part of the native ops' record (``ops.kernel_params``), plus ``exp_max`` (the
        E8M0 cap, unused by the float rule)."""
        mini = self.kind is ScaleKind.MINIFLOAT
        nan = self.nan_code
        return dict(scale_kind=int(self.kind), scale_bias=int(self.element.bias) if mini else 0,
                    scale_mantissa_bits=self.element.mantissa_bit_width if mini else 0,
                    scale_min=float(self.min_value), scale_max=float(self.max_value),
                    scale_nan_code=-1 if nan is None else nan, tensor_scale=bool(tensor_scale),
                    scale_overflow_nan=False, scale_flush_subnormal=False,
                    exp_max=min(127, _dtype_emax(dtype) - fmt.emax))

    def record(self) -> Dict[str, object]:
        """The settings as a plain dict (packed files): ``kind`` ('float32', 'bfloat16', 'minifloat'),
        ``name``, and for a minifloat ``element`` (its settings)."""
        out: Dict[str, object] = {"kind": self.kind.name.lower(), "name": self.name}
        if self.kind is ScaleKind.MINIFLOAT:
            out["element"] = self.element.record()
        return out

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
    return sorted(_NAMED) + ["e{k}m0 or ue{k}m0 (k = 2..8)", "ue{e}m{m} (unsigned minifloat, NaN-only, <= 8 bits)"]


def get_scale_format(fmt: Union[str, ScaleFormat]) -> ScaleFormat:
    """Resolve a scale format name (``'e8m0'``, ``'e5m0'``, ``'ue4m3'``, ``'float32'``, ``'bfloat16'``) or pass one through.

    ``ue{e}m{m}`` is the unsigned minifloat with ``e`` exponent and ``m`` mantissa bits whose all-ones
    code is NaN (as UE4M3); ``ue{k}m0`` (no mantissa: unsigned powers of two, as NVIDIA and DeepSeek
    spell E8M0) is the exponent format E{k}M0. The result keeps the name as given (lower case), so
    errors and descriptions say what the user wrote. ValueError naming ``scale_format`` for anything else.
    """
    if isinstance(fmt, (ExponentScale, FloatScale)):
        return fmt
    if not isinstance(fmt, str):
        raise TypeError(f"scale_format must be a scale format name or an ExponentScale/FloatScale, got {type(fmt).__name__}")
    key = fmt.strip().lower()
    if key in _NAMED:
        return _NAMED[key]
    exp = re.fullmatch(r"u?e(\d+)m0", key)
    if exp:
        return ExponentScale(int(exp.group(1)), name=key)
    mini = re.fullmatch(r"ue(\d+)m(\d+)", key)
    if mini:
        try:
            element = FloatFormat(int(mini.group(1)), int(mini.group(2)), SpecialValues.NAN_ONLY, signed=False,
                                  name=key)
        except ValueError as err:
            raise ValueError(f"scale_format {fmt!r}: {err}") from None
        return FloatScale(ScaleKind.MINIFLOAT, element, name=key)
    raise ValueError(f"unknown scale_format {fmt!r}; known: {', '.join(known_scale_formats())}")
