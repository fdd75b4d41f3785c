"""Element formats (integers and minifloats) and their derived constants.

A format is a frozen dataclass of *settings* (widths, signedness, special-value rule); every
derived number (bias, emax, max normal, NaN code, value grid) is a property computed from them,
so a format with other widths is automatically consistent.

Values follow the OCP Microscaling (MX) v1.0 spec and are checked against ``ml_dtypes`` in the
tests. All formats must fit inside float32's normal range, because the reference and the kernels
compute in float32 (exactly: every operation on the hot path is exact or a defined rounding).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, List, Optional, Union

import torch

__all__ = [
    "SpecialValues",
    "IntFormat",
    "FloatFormat",
    "ElementFormat",
    "get_format",
    "known_formats",
    "MX_FORMATS",
    "format_from_record",
]


class SpecialValues(str, enum.Enum):
    """How a minifloat spends codes on NaN and Inf.

    OCP      derived from the widths as the OCP MX/FP8 specs do: 8-bit e4m3 is NAN_ONLY,
             8-bit e5m2 (and any other format of 8+ bits with 5+ exponent bits) is IEEE,
             other formats of 8+ bits are NAN_ONLY, narrower formats (FP6, FP4) have NONE.
    IEEE     top exponent reserved: mantissa 0 is Inf, anything else NaN.
    NAN_ONLY the all-ones magnitude (S.1...1.1...1) is NaN, no Inf ("fn" in torch names).
    FNUZ     one NaN at the negative-zero code (0x80 for 8 bits), no Inf, no -0, bias + 1.
    NONE     every code is a finite number.
    """

    OCP = "ocp"
    IEEE = "ieee"
    NAN_ONLY = "nan_only"
    FNUZ = "fnuz"
    NONE = "none"


def _resolve_ocp(exponent_bits: int, mantissa_bits: int, signed: bool) -> SpecialValues:
    """The OCP rule for a minifloat's special values, by its widths."""
    total = exponent_bits + mantissa_bits + int(signed)
    if total < 8:
        return SpecialValues.NONE
    if exponent_bits >= 5:
        return SpecialValues.IEEE
    return SpecialValues.NAN_ONLY


@dataclass(frozen=True)
class IntFormat:
    """A two's complement (or unsigned) integer element format read as fixed point.

    Element value = code * 2**-frac_bits. MXINT8 is ``IntFormat(8)``: 1.6 fixed point, codes
    in [-127, 127] (narrow range, -128 unused), max normal 127/64, emax 0. The default
    ``frac_bits`` puts the binary point after the first magnitude bit (emax = 0), as MXINT8
    does, for any width.
    """

    bit_width: int
    signed: bool = True
    narrow_range: bool = True
    frac_bits: Optional[int] = None
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.bit_width, int) or not 2 <= self.bit_width <= 16:
            raise ValueError(f"bit_width must be an integer in [2, 16] for an integer format, got {self.bit_width!r}")
        if self.frac_bits is None:
            object.__setattr__(self, "frac_bits", self.bit_width - (2 if self.signed else 1))
        if not isinstance(self.frac_bits, int) or not 0 <= self.frac_bits <= 24:
            raise ValueError(f"frac_bits must be an integer in [0, 24], got {self.frac_bits!r}")
        if not self.name:
            object.__setattr__(self, "name", f"int{self.bit_width}" if self.signed else f"uint{self.bit_width}")

    is_float = False
    has_negative_zero = False  # (two's complement: one zero)

    @property
    def qmin(self) -> int:
        """Smallest integer code."""
        if not self.signed:
            return 0
        return -(2 ** (self.bit_width - 1)) + int(self.narrow_range)

    @property
    def qmax(self) -> int:
        """Largest integer code."""
        return 2 ** (self.bit_width - int(self.signed)) - 1

    @property
    def max_normal(self) -> float:
        """Largest element value, qmax * 2**-frac_bits."""
        return math.ldexp(self.qmax, -self.frac_bits)

    @property
    def emax(self) -> int:
        """floor(log2(max_normal)): the exponent the MX shared scale aligns to."""
        return math.frexp(self.max_normal)[1] - 1

    @property
    def min_subnormal(self) -> float:
        """Smallest positive element value (one step of the grid), 2**-frac_bits."""
        return math.ldexp(1.0, -self.frac_bits)

    @property
    def min_normal(self) -> Optional[float]:
        """Integers have no normal/subnormal split: None."""
        return None

    @property
    def bias(self) -> Optional[int]:
        """Integers have no exponent bias: None."""
        return None

    @property
    def mantissa_bit_width(self) -> int:
        """Bits after the leading one at emax: what `scale_mode='even'` rounds amax to."""
        return self.frac_bits + self.emax

    @property
    def special_values(self) -> SpecialValues:
        """Integers spend no code on NaN or Inf."""
        return SpecialValues.NONE

    has_inf = False
    has_nan = False
    nan_code = None

    def values(self) -> torch.Tensor:
        """Every representable element value, ascending, float64."""
        codes = torch.arange(self.qmin, self.qmax + 1, dtype=torch.float64)
        return torch.ldexp(codes, torch.tensor(-self.frac_bits, dtype=torch.float64))

    def record(self) -> Dict[str, object]:
        """The settings as a plain dict (packed files): ``kind`` 'int' plus the constructor fields."""
        return {"kind": "int", "name": self.name, "bit_width": self.bit_width, "signed": self.signed,
                "narrow_range": self.narrow_range, "frac_bits": int(self.frac_bits)}

    def describe(self) -> Dict[str, object]:
        """The format's settings and derived constants as a flat dict."""
        return {
            "name": self.name, "kind": "int", "bit_width": self.bit_width, "signed": self.signed,
            "narrow_range": self.narrow_range, "frac_bits": self.frac_bits, "qmin": self.qmin,
            "qmax": self.qmax, "emax": self.emax, "max_normal": self.max_normal,
            "min_subnormal": self.min_subnormal, "specials": "none",
        }


@dataclass(frozen=True)
class FloatFormat:
    """A minifloat element format: sign (optional), exponent and mantissa fields.

    ``FloatFormat(4, 3)`` is OCP FP8 E4M3 (max 448, NaN only); ``FloatFormat(2, 1)`` is FP4 E2M1.
    ``bias`` defaults to 2**(E-1) - 1 (2**(E-1) for FNUZ). Subnormals are always kept.
    """

    exponent_bit_width: int
    mantissa_bit_width: int
    special_values: SpecialValues = SpecialValues.OCP
    signed: bool = True
    bias: Optional[int] = None
    name: str = field(default="", compare=False)

    is_float = True

    def __post_init__(self) -> None:
        e, m = self.exponent_bit_width, self.mantissa_bit_width
        if not isinstance(e, int) or e < 1:
            raise ValueError(f"exponent_bit_width must be an integer >= 1, got {e!r}")
        if not isinstance(m, int) or m < 0:
            raise ValueError(f"mantissa_bit_width must be an integer >= 0, got {m!r}")
        if e + m + int(self.signed) > 16:
            raise ValueError(
                f"bit width {e + m + int(self.signed)} (exponent {e} + mantissa {m} + sign "
                f"{int(self.signed)}) exceeds 16; groupquant element formats have at most 16 bits")
        try:
            sv = SpecialValues(self.special_values)
        except ValueError:
            raise ValueError(
                f"special_values must be one of {[s.value for s in SpecialValues]}, got {self.special_values!r}") from None
        if sv is SpecialValues.OCP:
            sv = _resolve_ocp(e, m, self.signed)
        object.__setattr__(self, "special_values", sv)
        if sv is SpecialValues.IEEE and m == 0:
            raise ValueError("special_values='ieee' needs mantissa_bit_width >= 1 to tell NaN from Inf")
        if sv is SpecialValues.IEEE and e < 2:
            raise ValueError(
                "special_values='ieee' needs exponent_bit_width >= 2: with one exponent bit the only "
                "non-zero exponent field is reserved for Inf/NaN, leaving no normal numbers")
        if sv is SpecialValues.FNUZ and not self.signed:
            raise ValueError("special_values='fnuz' puts NaN on the negative-zero code; it needs signed=True")
        if sv is SpecialValues.NAN_ONLY and e + m == 1:
            raise ValueError("special_values='nan_only' would leave no finite non-zero value for a 1-bit magnitude")
        if self.bias is None:
            object.__setattr__(self, "bias", 2 ** (e - 1) - 1 + int(sv is SpecialValues.FNUZ))
        if not isinstance(self.bias, int):
            raise ValueError(f"bias must be an integer, got {self.bias!r}")
        if self.emax > 120 or self.emin - m < -120 or self.max_normal <= 0:
            raise ValueError(
                f"format e{e}m{m} with bias {self.bias} spans [2^{self.emin - m}, 2^{self.emax + 1}), "
                "too close to the edge of float32's range (2^-120 .. 2^120 allowed) in which groupquant computes exactly; "
                "use fewer exponent bits or another bias")
        if not self.name:
            prefix = {SpecialValues.FNUZ: "fnuz_"}.get(sv, "")
            object.__setattr__(self, "name", f"{prefix}fp{self.bit_width}_e{e}m{m}")

    @property
    def bit_width(self) -> int:
        """Total bits: sign + exponent + mantissa."""
        return self.exponent_bit_width + self.mantissa_bit_width + int(self.signed)

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number, 1 - bias."""
        return 1 - self.bias

    @property
    def _top_field(self) -> int:
        """Largest exponent field that holds finite normal numbers (ignoring NAN_ONLY's last code)."""
        top = 2 ** self.exponent_bit_width - 1
        return top - 1 if self.special_values is SpecialValues.IEEE else top

    @property
    def emax(self) -> int:
        """Exponent of the largest normal binade (OCP's emax for the element format)."""
        top = self._top_field
        if self.special_values is SpecialValues.NAN_ONLY and self.mantissa_bit_width == 0:
            top -= 1  # with no mantissa the all-ones code fills the whole top binade
        return top - self.bias

    @property
    def max_normal(self) -> float:
        """Largest finite value."""
        m = self.mantissa_bit_width
        mant_steps = 2 ** (m + 1) - 1  # 1.11..1 in units of 2**-m
        if self.special_values is SpecialValues.NAN_ONLY and m > 0:
            mant_steps -= 1  # S.1..1.1..1 is NaN
        return math.ldexp(mant_steps, self.emax - m)

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value, 2**emin."""
        return math.ldexp(1.0, self.emin)

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value, 2**(emin - mantissa_bit_width)."""
        return math.ldexp(1.0, self.emin - self.mantissa_bit_width)

    @property
    def has_inf(self) -> bool:
        """True where the format encodes +-Inf (IEEE special values)."""
        return self.special_values is SpecialValues.IEEE

    @property
    def has_negative_zero(self) -> bool:
        """True where the format encodes -0: signed, and not FNUZ (whose -0 code is its NaN). The
        one statement of the rule: encoding, element rounding and the kernel record read it."""
        return self.signed and self.special_values is not SpecialValues.FNUZ

    @property
    def has_nan(self) -> bool:
        """True where the format has a NaN code (IEEE, NaN-only and FNUZ rules)."""
        return self.special_values not in (SpecialValues.NONE,)

    @property
    def nan_code(self) -> Optional[int]:
        """The (positive) code this library writes for NaN, or None where there is none."""
        e, m = self.exponent_bit_width, self.mantissa_bit_width
        sv = self.special_values
        if sv is SpecialValues.NAN_ONLY:
            return 2 ** (e + m) - 1
        if sv is SpecialValues.IEEE:
            return ((2 ** e - 1) << m) | (1 << (m - 1))
        if sv is SpecialValues.FNUZ:
            return 1 << (e + m)
        return None

    def values(self) -> torch.Tensor:
        """Every finite representable value, ascending, float64 (one zero)."""
        m = self.mantissa_bit_width
        mant = torch.arange(2 ** m, dtype=torch.float64)
        sub = mant * math.ldexp(1.0, self.emin - m)
        binades = [sub]
        for exp in range(self.emin, self.emax + 1):
            binades.append((2 ** m + mant) * math.ldexp(1.0, exp - m))
        pos = torch.cat(binades)
        pos = pos[pos <= self.max_normal]
        if not self.signed:
            return pos
        return torch.cat([-pos[1:].flip(0), pos])

    def record(self) -> Dict[str, object]:
        """The settings as a plain dict (packed files): ``kind`` 'float' plus the constructor fields."""
        return {"kind": "float", "name": self.name, "exponent_bit_width": self.exponent_bit_width,
                "mantissa_bit_width": self.mantissa_bit_width, "special_values": self.special_values.value,
                "signed": self.signed, "bias": int(self.bias)}

    def describe(self) -> Dict[str, object]:
        """The format's settings and derived constants as a flat dict."""
        return {
            "name": self.name, "kind": "float", "bit_width": self.bit_width,
            "exponent_bit_width": self.exponent_bit_width, "mantissa_bit_width": self.mantissa_bit_width,
            "signed": self.signed, "bias": self.bias, "emax": self.emax, "max_normal": self.max_normal,
            "min_normal": self.min_normal, "min_subnormal": self.min_subnormal,
            "specials": self.special_values.value,
        }


ElementFormat = Union[IntFormat, FloatFormat]


def format_from_record(record: Dict[str, object]) -> ElementFormat:
    """Rebuild the format of a ``record()`` dict (``kind`` 'int' or 'float' plus the constructor
    fields); TypeError for a non-dict, ValueError names a missing or bad field."""
    if not isinstance(record, dict):
        raise TypeError(f"a format record is a dict, got {type(record).__name__}")
    kind = record.get("kind")
    fields = {"int": ("name", "bit_width", "signed", "narrow_range", "frac_bits"),
              "float": ("name", "exponent_bit_width", "mantissa_bit_width", "special_values", "signed", "bias")}
    if kind not in fields:
        raise ValueError(f"format record field 'kind' must be 'int' or 'float', got {kind!r}")
    missing = [f for f in fields[kind] if f not in record]
    if missing:
        raise ValueError(f"format record of kind {kind!r} lacks field(s) {missing}")
    args = {f: record[f] for f in fields[kind]}
    if kind == "int":
        return IntFormat(**args)  # type: ignore[arg-type]
    return FloatFormat(**args)  # type: ignore[arg-type]  # validates special_values and the widths itself


def _registry() -> Dict[str, ElementFormat]:
    """Build the table of named formats (microxcaling / Quark names, mx-prefixed forms, torch-like names)."""
    fmts: Dict[str, ElementFormat] = {
        "int8": IntFormat(8, name="int8"),
        "fp8_e4m3": FloatFormat(4, 3, name="fp8_e4m3"),
        "fp8_e5m2": FloatFormat(5, 2, name="fp8_e5m2"),
        "fp6_e3m2": FloatFormat(3, 2, name="fp6_e3m2"),
        "fp6_e2m3": FloatFormat(2, 3, name="fp6_e2m3"),
        "fp4_e2m1": FloatFormat(2, 1, name="fp4_e2m1"),
    }
    for key in list(fmts):
        fmts["mx" + key] = fmts[key]
    fmts["mxfp8"] = fmts["fp8_e4m3"]
    fmts["mxfp6"] = fmts["fp6_e2m3"]
    fmts["mxfp4"] = fmts["fp4_e2m1"]
    for bits in (2, 3, 4, 5, 6, 7, 8, 16):
        fmts.setdefault(f"int{bits}", IntFormat(bits, name=f"int{bits}"))
    fmts["mxint8"] = fmts["int8"]
    fmts["mxint4"] = fmts["int4"]
    fmts["float_ocp_e4m3"] = FloatFormat(4, 3, SpecialValues.OCP, name="float_ocp_e4m3")
    fmts["float_ocp_e5m2"] = FloatFormat(5, 2, SpecialValues.OCP, name="float_ocp_e5m2")
    fmts["float_fnuz_e4m3"] = FloatFormat(4, 3, SpecialValues.FNUZ, name="float_fnuz_e4m3")
    fmts["float_fnuz_e5m2"] = FloatFormat(5, 2, SpecialValues.FNUZ, name="float_fnuz_e5m2")
    fmts["float_e4m3"] = FloatFormat(4, 3, SpecialValues.NONE, name="float_e4m3")
    fmts["float_e5m2"] = FloatFormat(5, 2, SpecialValues.NONE, name="float_e5m2")
    return fmts


_FORMATS: Dict[str, ElementFormat] = _registry()

#: The six OCP MX element formats, by their canonical names.
MX_FORMATS: List[str] = ["int8", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"]


def known_formats() -> List[str]:
    """All names accepted by :func:`get_format`, sorted."""
    return sorted(_FORMATS)


def get_format(fmt: Union[str, ElementFormat]) -> ElementFormat:
    """Resolve a format name (``'fp8_e4m3'``, ``'mxfp4_e2m1'``, ``'int8'``, ...) or pass a format through.

    Raises ValueError listing the known names for an unknown one, TypeError for other types.
    """
    if isinstance(fmt, (IntFormat, FloatFormat)):
        return fmt
    if not isinstance(fmt, str):
        raise TypeError(f"fmt must be a format name or an IntFormat/FloatFormat, got {type(fmt).__name__}")
    key = fmt.strip().lower()
    if key not in _FORMATS:
        raise ValueError(f"unknown format {fmt!r} for argument 'fmt'; known formats: {', '.join(known_formats())}")
    return _FORMATS[key]
