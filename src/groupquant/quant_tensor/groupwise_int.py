"""GroupwiseIntQuantTensor: integer elements, one scale per group (MXINT8, int4 per group, ...)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..formats import IntFormat
from .base import QuantTensor
from .elements import int_codes
from .groupwise import GroupwiseFields

__all__ = ["GroupwiseIntQuantTensor"]


@dataclass(frozen=True, eq=False)
class GroupwiseIntQuantTensor(GroupwiseFields, QuantTensor):
    """``value = (int - zero_point) * scale`` per group, kept contracted (see
    :class:`GroupwiseFields`). For MXINT8 the element is ``int / 64`` (1.6 fixed point) times
    the E8M0 scale ``X``, so ``scale_ = X / 64``; :meth:`to_group_quantized` gives ``X``.

    Extra fields: ``bit_width``, ``signed``, ``narrow_range``.
    """

    bit_width: int = 8
    signed: bool = True
    narrow_range: bool = True

    @property
    def fmt(self) -> IntFormat:
        """The element format (fixed point, as the MX spec reads integer elements)."""
        return IntFormat(self.bit_width, signed=self.signed, narrow_range=self.narrow_range)

    def shared_scale_(self) -> torch.Tensor:
        return self.scale_.detach().float() * float(2 ** self.fmt.frac_bits)

    def int_(self) -> torch.Tensor:
        """Integer codes, contracted (int8 for <= 8 bits)."""
        return int_codes(self.value_, self.scale_, self.zero_point_, self.fmt)

    def int(self) -> torch.Tensor:
        """Integer codes in the original shape."""
        return self.layout.expand(self.int_())

    def codes_(self) -> torch.Tensor:
        return self.int_()
