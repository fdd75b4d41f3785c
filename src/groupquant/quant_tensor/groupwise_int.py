"""GroupwiseIntQuantTensor: integer elements, one scale per group (MXINT8, int4 per group, ...)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..formats import IntFormat
from .base import QuantTensor
from .elements import FormatAttributes, int_codes, int_factor
from .groupwise import GroupwiseFields

__all__ = ["GroupwiseIntQuantTensor"]


@dataclass(frozen=True, eq=False)
class GroupwiseIntQuantTensor(FormatAttributes, GroupwiseFields, QuantTensor):
    """``value = (int * 2**-frac_bits - zero_point) * scale`` per group, kept contracted (see
    :class:`GroupwiseFields`). ``scale_`` is the shared scale ``X`` exactly as the op produced it
    (the E8M0 power of two for MXINT8, whose elements are 1.6 fixed point: ``int / 64``).

    Extra fields: ``fmt`` (the integer format the op used), ``training``.
    """

    fmt: IntFormat
    training: bool = False

    #: The factor of the integer codes, contracted: ``value_ = int_ * int_scale_``.
    int_scale_ = property(lambda self: int_factor(self.scale_, self.fmt))

    def int_(self) -> torch.Tensor:
        """Integer codes, contracted (int8 for <= 8 bits): the op's own where it returned them,
        else read off the values (:meth:`codes_`)."""
        return self.codes_()

    def int(self) -> torch.Tensor:
        """Integer codes in the original shape."""
        return self.layout.expand(self.int_())

    def _codes_from_values(self) -> torch.Tensor:
        return self._elements_from_values(int_codes)
