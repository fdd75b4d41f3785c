"""Exponent scale formats ``E{k}M0``: a block's scale is a power of two stored as an unsigned exponent.

An unsigned k-bit exponent, bias ``2**(k-1) - 1``; code ``c`` is ``2**(c - bias)`` for
``c < 2**k - 1`` and the all-ones code is NaN. ``E8M0`` (k = 8) is the OCP MX scale (2**-127 ..
2**127); narrower ones are microxcaling's ``scale_bits`` (the shared exponent is clamped to
``[-bias, bias]``). The power-of-two scale rules (floor, ceil, even, rceil) produce these.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Dict, Optional, Tuple

import torch

from .bits import exp2i, float_log2_floor, floor_log2, significand
from .element import ElementFormat
from .scale_kind import E8M0_DTYPE, POWER_OF_TWO_RULES, REFERENCE_RULES, ScaleKind, dtype_emax, record_field

__all__ = ["ExponentScale"]


def _round_significand_carry(amax: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """1 where rounding amax's significand to ``mantissa_bits`` (nearest-even) carries into 2.0, else 0."""
    sig = significand(amax)  # [1, 2)
    steps = torch.round(sig * float(2 ** mantissa_bits))  # exact product, RNE
    return (steps >= 2 ** (mantissa_bits + 1)).to(torch.int32)


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
        top = dtype_emax(dtype) + (1 if rule == "float_log2" else 0)
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

    #: The ``kind`` of its records (:meth:`record`), read back by :meth:`from_record`.
    record_kinds: ClassVar[Tuple[str, ...]] = ("exponent",)

    def record(self) -> Dict[str, object]:
        """The settings as a plain dict (packed files): ``kind``, ``name``, ``bits``."""
        record: Dict[str, object] = {"kind": "exponent", "name": self.name, "bits": self.bits}
        if not self.saturating:
            record["saturating"] = False
        if self.flush_subnormal_blocks:
            record["flush_subnormal_blocks"] = True
        return record

    @classmethod
    def from_record(cls, record: Dict[str, object]) -> "ExponentScale":
        """The format of a :meth:`record` dict (kind 'exponent'); ValueError names a missing or bad field."""
        flags = {key: record[key] for key in ("saturating", "flush_subnormal_blocks") if key in record}
        bits = record_field(record, "exponent", "bits")
        return cls(bits, name=record.get("name", ""), **flags)  # type: ignore[arg-type]

    def describe(self) -> Dict[str, object]:
        """Settings and derived constants as a flat dict."""
        return {"name": self.name, "kind": "exponent", "bit_width": self.bits, "bias": self.bias,
                "min": f"2^{self.min_exponent}", "max": f"2^{self.max_exponent}", "nan_code": self.nan_code,
                "above_max": "saturate" if self.saturating else "NaN",
                "subnormal_blocks": "zero" if self.flush_subnormal_blocks else "kept"}
