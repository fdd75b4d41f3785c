"""GroupwiseFloatQuantTensor: minifloat elements, one scale per group (MXFP8/6/4, ...)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..formats import FloatFormat
from .base import QuantTensor
from .elements import FormatAttributes, float_codes, float_elements
from .groupwise import GroupwiseFields

__all__ = ["GroupwiseFloatQuantTensor"]


@dataclass(frozen=True, eq=False)
class GroupwiseFloatQuantTensor(FormatAttributes, GroupwiseFields, QuantTensor):
    """``value = (element - zero_point) * scale`` per group, kept contracted (see
    :class:`GroupwiseFields`); ``scale_`` is the shared scale ``X`` (E8M0 for MX).

    Extra fields: ``fmt`` (the minifloat format the op used), ``saturating``, ``training``.
    """

    fmt: FloatFormat
    saturating: bool = True
    training: bool = False

    def minifloat_(self) -> torch.Tensor:
        """Element values (float32, on the grid), contracted."""
        return self._elements_from_values(float_elements)

    def minifloat(self) -> torch.Tensor:
        """Element values in the original shape."""
        return self.layout.expand(self.minifloat_())

    def _codes_from_values(self) -> torch.Tensor:
        return self._elements_from_values(float_codes)
