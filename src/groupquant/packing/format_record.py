"""Element and scale formats as plain records (dicts of str/int/bool), for files and ``torch.load(weights_only=True)``.

A record holds a format's *settings* only (widths, signedness, special-value rule, bias or
fraction bits, name); every derived constant is recomputed from them on loading.
"""
from __future__ import annotations

from typing import Dict, Union

from ..formats import ElementFormat, ExponentScale, FloatFormat, FloatScale, IntFormat, ScaleFormat, ScaleKind

__all__ = ["format_record", "format_from_record", "scale_format_record", "scale_format_from_record"]

Record = Dict[str, Union[str, int, bool]]


def format_record(fmt: ElementFormat) -> Record:
    """The settings of ``fmt`` as a flat dict: ``kind`` ('int' or 'float') plus the constructor fields."""
    if not isinstance(fmt, (IntFormat, FloatFormat)):
        raise TypeError(f"fmt must be an IntFormat or FloatFormat, got {type(fmt).__name__}")
    return fmt.record()  # type: ignore[return-value]


def format_from_record(record: Record) -> ElementFormat:
    """Rebuild the format of a :func:`format_record` dict; ValueError names a missing or bad field."""
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
        return IntFormat(**args)
    return FloatFormat(**args)  # validates special_values and the widths itself


def scale_format_record(sf: ScaleFormat) -> Dict[str, object]:
    """The settings of a scale format: ``kind`` ('exponent', 'float32', 'bfloat16', 'minifloat'),
    ``name``, plus ``bits`` (exponent; ``saturating: False`` / ``flush_subnormal_blocks: True`` when
    set) or ``element`` (a :func:`format_record` of the minifloat)."""
    if not isinstance(sf, (ExponentScale, FloatScale)):
        raise TypeError(f"scale format must be an ExponentScale or FloatScale, got {type(sf).__name__}")
    return sf.record()


def scale_format_from_record(record: Dict[str, object]) -> ScaleFormat:
    """Rebuild the scale format of a :func:`scale_format_record` dict; ValueError names a bad field."""
    if not isinstance(record, dict):
        raise TypeError(f"a scale format record is a dict, got {type(record).__name__}")
    kind, name = record.get("kind"), record.get("name", "")
    if kind == "exponent":
        if "bits" not in record:
            raise ValueError("scale format record of kind 'exponent' lacks field 'bits'")
        flags = {key: record[key] for key in ("saturating", "flush_subnormal_blocks") if key in record}
        return ExponentScale(record["bits"], name=name, **flags)  # type: ignore[arg-type]
    if kind in ("float32", "bfloat16"):
        return FloatScale(ScaleKind[kind.upper()], name=name)  # type: ignore[arg-type]
    if kind == "minifloat":
        if "element" not in record:
            raise ValueError("scale format record of kind 'minifloat' lacks field 'element'")
        element = format_from_record(record["element"])  # type: ignore[arg-type]
        if not isinstance(element, FloatFormat):
            raise ValueError(f"scale format record: a minifloat scale's element is a float format, got {element.name}")
        return FloatScale(ScaleKind.MINIFLOAT, element, name=name)  # type: ignore[arg-type]
    raise ValueError(f"scale format record field 'kind' must be 'exponent', 'float32', 'bfloat16' or 'minifloat', "
                     f"got {kind!r}")
