"""IntQuantTensor: integer-quantized values with a per-tensor or per-channel scale."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..formats import IntFormat
from .base import QuantTensor
from .elements import int_codes

__all__ = ["IntQuantTensor"]


@dataclass(frozen=True, eq=False)
class IntQuantTensor(QuantTensor):
    """``value = (int - zero_point) * scale`` with ``int`` in ``[qmin, qmax]``.

    Fields:
        value: dequantized values (the input's shape and dtype; carries the gradient).
        scale: float32, 0-d (per tensor) or keepdim (per channel, e.g. ``[O, 1]``).
        zero_point: like ``scale`` (0 for the symmetric quantizers of groupquant).
        bit_width, signed, narrow_range: the integer format.
    """

    value: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor
    bit_width: int
    signed: bool = True
    narrow_range: bool = True

    @property
    def fmt(self) -> IntFormat:
        """The element format."""
        return IntFormat(self.bit_width, signed=self.signed, narrow_range=self.narrow_range)

    def int(self) -> torch.Tensor:
        """The integer codes (int8 for <= 8 bits, int16 above), the value's shape."""
        return int_codes(self.value, self.scale, self.zero_point, self.fmt)

    def codes(self) -> torch.Tensor:
        """The element codes: the two's complement integers, as :meth:`int`."""
        return self.int()
