"""Element formats as plain records (dicts of str/int/bool), for files and ``torch.load(weights_only=True)``.

A record holds a format's *settings* only (widths, signedness, special-value rule, bias or
fraction bits, name); every derived constant is recomputed from them on loading.
"""
from __future__ import annotations

from typing import Dict, Union

from ..formats import ElementFormat, FloatFormat, IntFormat

__all__ = ["format_record", "format_from_record"]

Record = Dict[str, Union[str, int, bool]]


def format_record(fmt: ElementFormat) -> Record:
    """The settings of ``fmt`` as a flat dict: ``kind`` ('int' or 'float') plus the constructor fields."""
    if isinstance(fmt, IntFormat):
        return {"kind": "int", "name": fmt.name, "bit_width": fmt.bit_width, "signed": fmt.signed,
                "narrow_range": fmt.narrow_range, "frac_bits": int(fmt.frac_bits)}
    if isinstance(fmt, FloatFormat):
        return {"kind": "float", "name": fmt.name, "exponent_bit_width": fmt.exponent_bit_width,
                "mantissa_bit_width": fmt.mantissa_bit_width, "special_values": fmt.special_values.value,
                "signed": fmt.signed, "bias": int(fmt.bias)}
    raise TypeError(f"fmt must be an IntFormat or FloatFormat, got {type(fmt).__name__}")


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
