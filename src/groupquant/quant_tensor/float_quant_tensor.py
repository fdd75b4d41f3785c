"""FloatQuantTensor: minifloat-quantized values with a per-tensor or per-channel scale."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..formats import SpecialValues
from .base import QuantTensor
from .elements import FloatWidthsMixin, float_codes, float_elements

__all__ = ["FloatQuantTensor"]


@dataclass(frozen=True, eq=False)
class FloatQuantTensor(FloatWidthsMixin, QuantTensor):
    """``value = (element - zero_point) * scale`` with ``element`` on a minifloat grid.

    Fields:
        value: dequantized values (the input's shape and dtype; carries the gradient).
        scale: float32, 0-d (per tensor) or keepdim (per channel).
        zero_point: like ``scale`` (0 for groupquant's quantizers).
        exponent_bit_width, mantissa_bit_width, signed: the widths.
        nan_inf_rule: the resolved NaN/Inf rule (``SpecialValues.NAN_ONLY`` for OCP e4m3, ...).
        exponent_bias: the bias in use (None: the standard one).
    """

    value: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor
    exponent_bit_width: int
    mantissa_bit_width: int
    signed: bool = True
    nan_inf_rule: SpecialValues = SpecialValues.OCP
    exponent_bias: Optional[int] = None

    def minifloat(self) -> torch.Tensor:
        """Element values (float32, on the format's grid), the value's shape."""
        return float_elements(self.value, self.scale, self.zero_point, self.fmt)

    def codes(self) -> torch.Tensor:
        """Element bit codes (uint8 for <= 8 bits: ``sign | exponent | mantissa``)."""
        return float_codes(self.value, self.scale, self.zero_point, self.fmt)
