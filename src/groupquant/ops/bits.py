"""Exact exponent arithmetic (floor(log2|x|), 2**k): defined in :mod:`groupquant.formats.bits`,
where the scale formats use it; the ops read it from here."""
from __future__ import annotations

from ..formats.bits import exp2i, floor_log2, significand

__all__ = ["floor_log2", "exp2i", "significand"]
