"""Which torch dtype holds a format's packed elements and the E8M0 scale bytes.

- 8-bit formats keep one code per byte, typed where torch has the type: OCP FP8 E4M3 ->
  ``torch.float8_e4m3fn``, OCP FP8 E5M2 -> ``torch.float8_e5m2``, their FNUZ forms ->
  ``float8_e4m3fnuz`` / ``float8_e5m2fnuz``, signed 8-bit integers (MXINT8) -> ``int8``,
  any other 8-bit format -> ``uint8``.
- Every other width is a bit stream (see :mod:`groupquant.ops.bitstream`) in ``uint8``.
- Scales, one per group, by scale format (:func:`scale_storage_dtype`): E8M0 bytes typed
  ``torch.float8_e8m0fnu`` where this torch has it, else ``uint8`` (same bytes); narrower
  exponent codes E{k}M0 ``uint8``; UE4M3 bytes (NVFP4) ``torch.float8_e4m3fn`` (the same bytes:
  the sign bit is always 0, 0x7F is NaN in both); other unsigned minifloats ``uint8``; bfloat16
  scales ``bfloat16`` (exact: they are bf16-rounded); float32 scales ``float32``.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..formats import E8M0_DTYPE, ElementFormat, FloatFormat, IntFormat, ScaleFormat, SpecialValues

__all__ = ["E8M0_DTYPE", "element_storage_dtype", "is_byte_format", "scale_storage_dtype"]



def _torch_float8(fmt: FloatFormat) -> Optional[torch.dtype]:
    """The torch float8 dtype with exactly ``fmt``'s bits and meaning, or None."""
    if not fmt.signed:
        return None
    key = (fmt.exponent_bit_width, fmt.mantissa_bit_width, fmt.special_values, fmt.bias)
    table = {
        (4, 3, SpecialValues.NAN_ONLY, 7): "float8_e4m3fn",
        (5, 2, SpecialValues.IEEE, 15): "float8_e5m2",
        (4, 3, SpecialValues.FNUZ, 8): "float8_e4m3fnuz",
        (5, 2, SpecialValues.FNUZ, 16): "float8_e5m2fnuz",
    }
    name = table.get(key)
    return getattr(torch, name, None) if name else None


def is_byte_format(fmt: ElementFormat) -> bool:
    """True for 8-bit formats, whose elements are stored one per byte in the contracted shape."""
    return fmt.bit_width == 8


def element_storage_dtype(fmt: ElementFormat) -> torch.dtype:
    """The dtype of a packed element tensor of ``fmt`` (``uint8`` for every bit stream)."""
    if not is_byte_format(fmt):
        return torch.uint8
    if isinstance(fmt, IntFormat):
        return torch.int8 if fmt.signed else torch.uint8
    return _torch_float8(fmt) or torch.uint8


def scale_storage_dtype(scale_format: ScaleFormat) -> torch.dtype:
    """The dtype of packed scales of ``scale_format`` (its own ``storage_dtype``; see the module docstring)."""
    return scale_format.storage_dtype
