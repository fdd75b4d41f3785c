"""Element and scale formats as plain records (dicts of str/int/bool), for files and ``torch.load(weights_only=True)``.

A record holds a format's *settings* only (widths, signedness, special-value rule, bias or
fraction bits, name); every derived constant is recomputed from them on loading. The formats write
their own records (``record()``) and read them back (:func:`groupquant.formats.element.format_from_record`,
each scale format class's ``from_record`` through :func:`groupquant.formats.scale.scale_format_from_record`),
so a new kind of format needs nothing here.
"""
from __future__ import annotations

from typing import Dict, Union

from ..formats import ElementFormat, FloatFormat, IntFormat, ScaleFormat
from ..formats.element import format_from_record
from ..formats.scale import SCALE_FORMAT_CLASSES, scale_format_from_record

__all__ = ["format_record", "format_from_record", "scale_format_record", "scale_format_from_record"]

Record = Dict[str, Union[str, int, bool]]


def format_record(fmt: ElementFormat) -> Record:
    """The settings of ``fmt`` as a flat dict: ``kind`` ('int' or 'float') plus the constructor fields."""
    if not isinstance(fmt, (IntFormat, FloatFormat)):
        raise TypeError(f"fmt must be an IntFormat or FloatFormat, got {type(fmt).__name__}")
    return fmt.record()  # type: ignore[return-value]


def scale_format_record(sf: ScaleFormat) -> Dict[str, object]:
    """The settings of a scale format: ``kind`` ('exponent', 'float32', 'bfloat16', 'minifloat'),
    ``name``, plus ``bits`` (exponent; ``saturating: False`` / ``flush_subnormal_blocks: True`` when
    set) or ``element`` (a :func:`format_record` of the minifloat)."""
    if not isinstance(sf, SCALE_FORMAT_CLASSES):
        raise TypeError(f"scale format must be an ExponentScale or FloatScale, got {type(sf).__name__}")
    return sf.record()
