"""Rounding onto a float element format's grid by table look-up, for GPTQ's column sweep.

GPTQ rounds one weight column at a time (a few hundred values), thousands of times per layer; there
:func:`groupquant.ops.round_to_format`'s exact exponent arithmetic (some thirty small tensor ops) is
mostly call overhead. A signed float format with saturating round-to-nearest-even has a short sorted
list of non-negative values ``v_0 = 0 < v_1 < ... < v_n = max_normal`` (:meth:`FloatFormat.values`);
a magnitude ``a`` rounds to ``v_j`` with ``m_(j-1) < a < m_j`` (``m_j`` the midpoints, exact in
float32: one bit more than the format's mantissa), a tie ``a = m_j`` goes where
:func:`round_to_format` sends the midpoint itself (to the even code), and beyond the last midpoint
to ``max_normal`` (saturation). The sign is put back, and a format without negative zero turns
``-0`` into ``+0``, as :func:`round_to_format` does. The result equals :func:`round_to_format`'s
bit for bit (tests check it on every grid value, midpoint and their float32 neighbours);
:func:`lookup_rounder` returns None where it does not apply (other rounding modes, integer or
unsigned formats, non-saturating rounding) and callers keep :func:`round_to_format`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..formats import ElementFormat, FloatFormat
from ..ops import round_to_format

__all__ = ["LookupRounder", "lookup_rounder"]


@dataclass(frozen=True)
class LookupRounder:
    """The tables of one format (float32, on one device): ``values`` ``[n + 1]`` the non-negative grid,
    ``midpoints`` ``[n]``, ``tie_up`` ``[n]`` (bool: a value exactly at ``midpoints[j]`` rounds to
    ``values[j + 1]``), ``negative_zero`` whether the format keeps ``-0``."""

    values: torch.Tensor
    midpoints: torch.Tensor
    tie_up: torch.Tensor
    negative_zero: bool

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (float32, already divided by its scale) rounded onto the grid, saturated (float32)."""
        a = x.abs()
        j = torch.bucketize(a, self.midpoints)  # midpoints[j - 1] < a <= midpoints[j]
        at = j.clamp(max=self.midpoints.numel() - 1)
        j = j + ((a == self.midpoints[at]) & self.tie_up[at])
        v = torch.copysign(self.values[j], x)
        return v if self.negative_zero else torch.where(v == 0, torch.zeros_like(v), v)


def lookup_rounder(fmt: ElementFormat, rounding: str, device: torch.device,
                   saturating: bool = True) -> Optional[LookupRounder]:
    """The :class:`LookupRounder` of ``fmt`` for ``rounding`` on ``device``, or None where the table
    does not apply (module doc)."""
    if not (isinstance(fmt, FloatFormat) and fmt.signed and rounding == "even" and saturating):
        return None
    pos = fmt.values()
    pos = pos[pos >= 0].float()
    mids = (pos[:-1] + pos[1:]) / 2
    if not torch.equal(mids.double(), (pos[:-1].double() + pos[1:].double()) / 2):
        return None  # (a midpoint not exact in float32: no format of 23 mantissa bits or fewer)
    tie_up = round_to_format(mids, fmt, rounding) == pos[1:]
    return LookupRounder(pos.to(device), mids.to(device), tie_up.to(device), fmt.has_negative_zero)
