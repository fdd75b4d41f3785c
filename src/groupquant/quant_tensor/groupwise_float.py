"""GroupwiseFloatQuantTensor: minifloat elements, one scale per group (MXFP8/6/4, ...)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..formats import SpecialValues
from .base import QuantTensor
from .elements import FloatWidthsMixin, float_codes, float_elements
from .groupwise import GroupwiseFields

__all__ = ["GroupwiseFloatQuantTensor"]


@dataclass(frozen=True, eq=False)
class GroupwiseFloatQuantTensor(FloatWidthsMixin, GroupwiseFields, QuantTensor):
    """``value = (element - zero_point) * scale`` per group, kept contracted (see
    :class:`GroupwiseFields`); ``scale_`` is the shared scale ``X`` (E8M0 for MX).

    Extra fields: ``exponent_bit_width``, ``mantissa_bit_width``, ``signed``, ``nan_inf_rule``
    (resolved), ``exponent_bias`` (None: standard).
    """

    exponent_bit_width: int = 4
    mantissa_bit_width: int = 3
    signed: bool = True
    nan_inf_rule: SpecialValues = SpecialValues.OCP
    exponent_bias: Optional[int] = None

    def shared_scale_(self) -> torch.Tensor:
        return self.scale_.detach().float()

    def minifloat_(self) -> torch.Tensor:
        """Element values (float32, on the grid), contracted."""
        return float_elements(self.value_, self.scale_, self.zero_point_, self.fmt)

    def minifloat(self) -> torch.Tensor:
        """Element values in the original shape."""
        return self.layout.expand(self.minifloat_())

    def codes_(self) -> torch.Tensor:
        return float_codes(self.value_, self.scale_, self.zero_point_, self.fmt)
