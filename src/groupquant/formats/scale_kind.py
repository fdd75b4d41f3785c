"""What every scale format shares: the kind numbering, the scale rules, and small helpers.

:class:`ScaleKind` numbers the ways a scale value is stored, as the kernels do (csrc ``ScaleKind`` in
``group_quant.h``). The scale format classes (:mod:`.scale_exponent`, :mod:`.scale_float`) and the
registry (:mod:`.scale`) import from here, so this module imports none of them.
"""
from __future__ import annotations

import enum
import math
from typing import Dict, Tuple

import torch

__all__ = ["ScaleKind", "POWER_OF_TWO_RULES", "FLOAT_RULES", "REFERENCE_RULES", "SCALE_RULES", "E8M0_DTYPE", "dtype_emax",
           "record_field"]

#: The power-of-two scale rules (exponent formats), see :meth:`ExponentScale.shared_exponent`.
POWER_OF_TWO_RULES: Tuple[str, ...] = ("floor", "ceil", "even", "rceil")
#: The float scale rule (float-valued formats): ``amax / max_normal``, see :meth:`FloatScale.block_scale`.
FLOAT_RULES: Tuple[str, ...] = ("float",)
#: Power-of-two rules only the PyTorch reference computes (the native kernels refuse them by name):
#: ``float_log2``, microxcaling's block exponent ``floor(torch.log2(amax))`` in the input's dtype.
REFERENCE_RULES: Tuple[str, ...] = ("float_log2",)
#: Every scale rule, in the kernels' numbering (csrc ``ScaleMode``; the reference rules come last).
SCALE_RULES: Tuple[str, ...] = POWER_OF_TWO_RULES + FLOAT_RULES + REFERENCE_RULES

#: dtype of stored E8M0 scale bytes (torch.float8_e8m0fnu where this torch has it, else uint8: same bytes).
E8M0_DTYPE: torch.dtype = getattr(torch, "float8_e8m0fnu", torch.uint8)


class ScaleKind(enum.IntEnum):
    """How a scale value is stored; the values are the kernels' numbering (csrc ``ScaleKind``)."""

    EXPONENT = 0   # E{k}M0: a power of two
    FLOAT32 = 1    # any positive float32
    BFLOAT16 = 2   # float32 rounded to bfloat16 (nearest even)
    MINIFLOAT = 3  # an unsigned minifloat (ue4m3, ...), clamped to its normal range


def dtype_emax(dtype: torch.dtype) -> int:
    """floor(log2(largest finite value of ``dtype``)): 127 for float32 / bfloat16, 15 for float16."""
    return math.frexp(torch.finfo(dtype).max)[1] - 1


def record_field(record: Dict[str, object], kind: str, key: str) -> object:
    """``record[key]`` of a scale format record of ``kind``; ValueError naming the field when it is absent."""
    if key not in record:
        raise ValueError(f"scale format record of kind {kind!r} lacks field {key!r}")
    return record[key]
