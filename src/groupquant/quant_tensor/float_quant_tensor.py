"""FloatQuantTensor: minifloat-quantized values with a per-tensor or per-channel scale."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..formats import FloatFormat
from .base import QuantTensor
from .elements import FormatAttributes, float_codes, float_elements

__all__ = ["FloatQuantTensor"]


@dataclass(frozen=True, eq=False)
class FloatQuantTensor(FormatAttributes, QuantTensor):
    """``value = (element - zero_point) * scale`` with ``element`` on a minifloat grid.

    Fields:
        value: dequantized values (the input's shape and dtype; carries the gradient).
        scale: float32, 0-d (per tensor) or keepdim (per channel), as the op produced it.
        zero_point: like ``scale`` (0 for groupquant's quantizers).
        fmt: the minifloat format the op used (``exponent_bit_width``, ``nan_values``, ... read it).
        saturating: whether values past max normal were clamped (False: Inf/NaN).
        training: whether the producing module was in training mode.
    """

    value: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor
    fmt: FloatFormat
    saturating: bool = True
    training: bool = False

    def minifloat(self) -> torch.Tensor:
        """Element values (float32, on the format's grid), the value's shape."""
        return float_elements(self.value, self.scale, self.zero_point, self.fmt)

    def codes(self) -> torch.Tensor:
        """Element bit codes (uint8 for <= 8 bits: ``sign | exponent | mantissa``)."""
        return float_codes(self.value, self.scale, self.zero_point, self.fmt)
