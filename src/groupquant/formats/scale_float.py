"""Float-valued scale formats: a block's scale is any positive float32, a bfloat16, or an unsigned minifloat.

- ``float32`` (today's ``scale_mode='float'``) and ``bfloat16`` (round to nearest even) are stored as
  values of their torch dtype;
- an unsigned minifloat such as ``ue4m3`` (the NVFP4 block scale: FP8 E4M3 with its sign bit always
  0, max 448, code 0x7F NaN) is stored as one code byte per scale.

The ``float`` rule (``amax / max_normal``) produces these. A minifloat scale is clamped to its normal
range ``[min_normal, max_normal]`` before rounding (nearest even), as NVFP4 clamps to ``[2**-6, 448]``;
float32 / bfloat16 scales are clamped to the format's max, and a zero scale (an all-zero block)
becomes 1. Minifloat scales may take a second, per-tensor float32 scale (two-level scaling, NVFP4):
see :mod:`groupquant.ops.shared_scale`.

What differs between the three kinds is data, one row of :data:`_KINDS` each; a minifloat's
constants come from its element format.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, Dict, Optional, Tuple

import torch

from .bits import divide, exp2i, floor_log2
from .element import ElementFormat, FloatFormat, SpecialValues, format_from_record
from .scale_kind import FLOAT_RULES, ScaleKind, dtype_emax, record_field

__all__ = ["FloatScale"]


def _keep(s: torch.Tensor) -> torch.Tensor:
    """float32 scales as they are (a float32 scale format holds every positive float32)."""
    return s


def _to_bfloat16(s: torch.Tensor) -> torch.Tensor:
    """float32 scales rounded to bfloat16 (nearest even), as float32."""
    return s.to(torch.bfloat16).float()


@dataclass(frozen=True)
class _FloatKind:
    """What a float-valued scale kind fixes: for a kind stored as values, their torch dtype and its
    rounding; for the minifloat kind (``dtype`` None) the element format gives the rest."""

    default_name: Optional[str]             # None: ``ue{e}m{m}`` from the element format
    dtype: Optional[torch.dtype]            # stored values' dtype; None: one code byte per scale
    round_values: Optional[Callable[[torch.Tensor], torch.Tensor]]  # float32 -> float32 on the format
    onnx_type: Optional[str]                # ONNX TensorProto type of the values (minifloat: by storage)
    any_scale_source: bool                  # whether running statistics / learned scales can be stored
    takes_tensor_scale: bool                # whether a per-tensor float32 second scale may extend the range


_KINDS: Dict[ScaleKind, _FloatKind] = {
    ScaleKind.FLOAT32: _FloatKind("float32", torch.float32, _keep, "FLOAT", True, False),
    ScaleKind.BFLOAT16: _FloatKind("bfloat16", torch.bfloat16, _to_bfloat16, "BFLOAT16", False, False),
    ScaleKind.MINIFLOAT: _FloatKind(None, None, None, None, False, True),
}


def _check_minifloat(el: Optional[FloatFormat]) -> None:
    """ValueError unless ``el`` can be a minifloat scale: an unsigned FloatFormat of at most 8 bits,
    at least 2 exponent bits, with a NaN code (a block holding NaN or Inf stores it)."""
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
        row = _KINDS[kind]
        if row.dtype is None:
            _check_minifloat(self.element)
        elif self.element is not None:
            raise ValueError(f"scale_format: {kind.name.lower()} scales take no element format")
        if not self.name:
            object.__setattr__(self, "name", row.default_name
                               or f"ue{self.element.exponent_bit_width}m{self.element.mantissa_bit_width}")

    @property
    def _row(self) -> _FloatKind:
        """This kind's row of :data:`_KINDS`."""
        return _KINDS[self.kind]

    @property
    def _value_dtype(self) -> Optional[torch.dtype]:
        """dtype of the stored values (float32, bfloat16), None for a minifloat (stored as codes)."""
        return self._row.dtype

    @property
    def bit_width(self) -> int:
        """Storage bits per scale: 32, 16, or one byte for a minifloat (UE4M3 is FP8 E4M3 with sign bit 0)."""
        dtype = self._value_dtype
        return 8 if dtype is None else torch.finfo(dtype).bits

    @property
    def is_coded(self) -> bool:
        """True for minifloats (one code byte per scale), False for float32 / bfloat16 (stored as values)."""
        return self._value_dtype is None

    @property
    def min_value(self) -> float:
        """Lower clamp of a scale: the minifloat's min normal; 0 for float32 / bfloat16 (0 -> 1)."""
        return self.element.min_normal if self.is_coded else 0.0

    @property
    def max_value(self) -> float:
        """Largest scale (upper clamp): the minifloat's max normal, or the value dtype's max."""
        return self.element.max_normal if self.is_coded else float(torch.finfo(self._value_dtype).max)

    @property
    def nan_code(self) -> Optional[int]:
        """Code of a NaN scale (minifloats; None for float32 / bfloat16, stored as values)."""
        return self.element.nan_code if self.is_coded else None

    # ---- behaviour ------------------------------------------------------------------------------

    rules = FLOAT_RULES
    default_rule = "float"

    @property
    def any_scale_source(self) -> bool:
        """Whether scales from every source (running statistics, learned) can be stored: float32
        only; bfloat16 and minifloat scales take abs-max scales from each tensor."""
        return self._row.any_scale_source

    @property
    def takes_tensor_scale(self) -> bool:
        """Whether a per-tensor float32 second scale may extend the range (minifloats: NVFP4)."""
        return self._row.takes_tensor_scale

    @property
    def storage_dtype(self) -> torch.dtype:
        """dtype of stored scales: float32 / bfloat16 values; minifloat bytes as ``torch.float8_e4m3fn``
        when they are FP8 E4M3's with sign bit 0 (UE4M3: same bytes, 0x7F NaN in both), else ``uint8``."""
        if not self.is_coded:
            return self._value_dtype
        el = self.element
        if (el.exponent_bit_width, el.mantissa_bit_width, el.special_values, el.bias) == (4, 3, SpecialValues.NAN_ONLY, 7):
            return getattr(torch, "float8_e4m3fn", torch.uint8)
        return torch.uint8

    @property
    def onnx_type(self) -> Optional[str]:
        """Name of the ONNX ``TensorProto`` type holding exactly these scales: ``FLOAT``, ``BFLOAT16``,
        ``FLOAT8E4M3FN`` for UE4M3 (its bytes with sign bit 0); None for other minifloats (rounded
        onto their grid in float32 by the exporter)."""
        if not self.is_coded:
            return self._row.onnx_type
        return "FLOAT8E4M3FN" if self.storage_dtype == getattr(torch, "float8_e4m3fn", None) else None

    def kept_codes(self, codes: torch.Tensor) -> Optional[torch.Tensor]:
        """What a quantized tensor keeps of the op's scale codes: a minifloat's bytes; None for
        float32 / bfloat16 (stored as values)."""
        return codes if self.is_coded else None

    def _round(self, s: torch.Tensor) -> torch.Tensor:
        """float32 ``s`` within [min_value, max_value] rounded onto the format, nearest even
        (identity for float32). A minifloat scale is a normal value of its element format here, so
        it is ``round(s / 2**(e - m)) * 2**(e - m)`` with ``e = floor(log2(s))``, exact in float32."""
        if not self.is_coded:
            return self._row.round_values(s)
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
        raw = divide(amax, fmt.max_normal)  # a true division on every device, as the kernels
        if tensor_scale is not None:
            raw = raw / tensor_scale
        s = self._round(raw.clamp(self.min_value, self.max_value))
        s = torch.where(s > 0, s, torch.ones_like(s))
        if self.is_coded:
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
        coded = self.is_coded
        nan = self.nan_code
        return dict(scale_kind=int(self.kind), scale_bias=int(self.element.bias) if coded else 0,
                    scale_mantissa_bits=self.element.mantissa_bit_width if coded else 0,
                    scale_min=float(self.min_value), scale_max=float(self.max_value),
                    scale_nan_code=-1 if nan is None else nan, tensor_scale=bool(tensor_scale),
                    scale_overflow_nan=False, scale_flush_subnormal=False,
                    exp_max=min(127, dtype_emax(dtype) - fmt.emax))

    #: The ``kind`` of its records (:meth:`record`), read back by :meth:`from_record`.
    record_kinds: ClassVar[Tuple[str, ...]] = tuple(kind.name.lower() for kind in _KINDS)

    def record(self) -> Dict[str, object]:
        """The settings as a plain dict (packed files): ``kind`` ('float32', 'bfloat16', 'minifloat'),
        ``name``, and for a minifloat ``element`` (its settings)."""
        out: Dict[str, object] = {"kind": self.kind.name.lower(), "name": self.name}
        if self.is_coded:
            out["element"] = self.element.record()
        return out

    @classmethod
    def from_record(cls, record: Dict[str, object]) -> "FloatScale":
        """The format of a :meth:`record` dict (one of :attr:`record_kinds`); ValueError names a
        missing or bad field."""
        kind_name = str(record.get("kind"))
        kind = ScaleKind[kind_name.upper()]
        element = None
        if _KINDS[kind].dtype is None:
            element = format_from_record(record_field(record, kind_name, "element"))  # type: ignore[arg-type]
            if not isinstance(element, FloatFormat):
                raise ValueError("scale format record: a minifloat scale's element is a float format, "
                                 f"got {element.name}")
        return cls(kind, element, name=record.get("name", ""))  # type: ignore[arg-type]

    def describe(self) -> Dict[str, object]:
        """Settings and derived constants as a flat dict."""
        out: Dict[str, object] = {"name": self.name, "kind": self.kind.name.lower(), "bit_width": self.bit_width,
                                  "min": self.min_value, "max": self.max_value}
        if self.is_coded:
            out.update(bias=self.element.bias, nan_code=self.nan_code)
        return out
