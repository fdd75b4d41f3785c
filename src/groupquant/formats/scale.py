"""Scale formats: the number format a block's shared scale is stored in, and their registry.

Two families, told apart by ``is_power_of_two``, one class each (a class owns everything its
formats do: block scale, encode / decode, storage dtype, kernel fields, record, ONNX type):

- :class:`~.scale_exponent.ExponentScale` ``E{k}M0``: a power of two stored as an unsigned
  exponent (``E8M0`` is the OCP MX scale; narrower ones microxcaling's ``scale_bits``);
- :class:`~.scale_float.FloatScale`: a float32 value, a bfloat16 value, or an unsigned minifloat
  such as ``ue4m3`` (the NVFP4 block scale).

This module keeps the kind numbering (:class:`ScaleKind`, from :mod:`.scale_kind`), the named
formats, and the registry: :func:`get_scale_format` resolves names and :func:`scale_format_from_record`
finds the class of a packed record's ``kind`` (each class lists its ``record_kinds`` and reads its own
records with ``from_record``). A new kind is one class added to :data:`SCALE_FORMAT_CLASSES`.
"""
from __future__ import annotations

import re
from typing import Dict, List, Tuple, Type, Union

from .element import FloatFormat, SpecialValues
from .scale_exponent import ExponentScale
from .scale_float import FloatScale
from .scale_kind import E8M0_DTYPE, FLOAT_RULES, POWER_OF_TWO_RULES, REFERENCE_RULES, SCALE_RULES, ScaleKind

__all__ = ["ScaleKind", "ExponentScale", "FloatScale", "ScaleFormat", "E8M0", "UE4M3", "FLOAT32_SCALE",
           "BFLOAT16_SCALE", "get_scale_format", "known_scale_formats", "scale_format_from_record",
           "SCALE_FORMAT_CLASSES", "POWER_OF_TWO_RULES", "FLOAT_RULES", "REFERENCE_RULES", "SCALE_RULES", "E8M0_DTYPE"]

ScaleFormat = Union[ExponentScale, FloatScale]

#: Every scale format class; a new kind of scale is one more class here.
SCALE_FORMAT_CLASSES: Tuple[Type, ...] = (ExponentScale, FloatScale)

E8M0 = ExponentScale(8)
UE4M3 = FloatScale(ScaleKind.MINIFLOAT, FloatFormat(4, 3, SpecialValues.NAN_ONLY, signed=False, name="ue4m3"))
FLOAT32_SCALE = FloatScale(ScaleKind.FLOAT32)
BFLOAT16_SCALE = FloatScale(ScaleKind.BFLOAT16)

_NAMED: Dict[str, ScaleFormat] = {"e8m0": E8M0, "ue4m3": UE4M3, "float32": FLOAT32_SCALE, "fp32": FLOAT32_SCALE,
                                  "float": FLOAT32_SCALE, "bfloat16": BFLOAT16_SCALE, "bf16": BFLOAT16_SCALE}

#: The class reading each record ``kind`` ('exponent', 'float32', 'bfloat16', 'minifloat').
_RECORD_KINDS: Dict[str, Type] = {kind: cls for cls in SCALE_FORMAT_CLASSES for kind in cls.record_kinds}


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
    if isinstance(fmt, SCALE_FORMAT_CLASSES):
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


def scale_format_from_record(record: Dict[str, object]) -> ScaleFormat:
    """Rebuild the scale format of a ``record()`` dict by the class that owns its ``kind``;
    TypeError for a non-dict, ValueError naming the missing or bad field."""
    if not isinstance(record, dict):
        raise TypeError(f"a scale format record is a dict, got {type(record).__name__}")
    kind = record.get("kind")
    cls = _RECORD_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        names = [repr(name) for name in _RECORD_KINDS]
        raise ValueError(f"scale format record field 'kind' must be {', '.join(names[:-1])} or {names[-1]}, "
                         f"got {kind!r}")
    return cls.from_record(record)
