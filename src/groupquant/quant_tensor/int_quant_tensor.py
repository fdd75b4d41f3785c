"""IntQuantTensor: integer-quantized values with a per-tensor or per-channel scale."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..formats import IntFormat
from .base import QuantTensor
from .elements import FormatAttributes, int_codes, int_factor

__all__ = ["IntQuantTensor"]


@dataclass(frozen=True, eq=False)
class IntQuantTensor(FormatAttributes, QuantTensor):
    """``value = (int * 2**-frac_bits - zero_point) * scale`` with ``int`` in ``[qmin, qmax]``.

    Fields:
        value: dequantized values (the input's shape and dtype; carries the gradient).
        scale: the shared scale ``X`` as the op produced it (float32), 0-d (per tensor) or keepdim
            (per channel, e.g. ``[O, 1]``). ``int_scale`` is ``X * 2**-frac_bits`` (Brevitas's
            ``value = int * scale``).
        zero_point: like ``scale`` (0 for the symmetric quantizers of groupquant).
        fmt: the integer format the op used (width, signedness, narrow range, fixed point).
        training: whether the producing module was in training mode.
    """

    value: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor
    fmt: IntFormat
    training: bool = False

    #: The factor of the integer codes: ``value = int * int_scale``.
    int_scale = property(lambda self: int_factor(self.scale, self.fmt))

    def int(self) -> torch.Tensor:
        """The integer codes (int8 for <= 8 bits, int16 above), the value's shape."""
        return int_codes(self.value, self.scale, self.zero_point, self.fmt)

    def codes(self) -> torch.Tensor:
        """The element codes: the two's complement integers, as :meth:`int`."""
        return self.int()
