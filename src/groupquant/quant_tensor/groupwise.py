"""What group-wise quant tensors share: the contracted layout, expanded only when read.

Fields ending in ``_`` are contracted (see :class:`groupquant.ops.GroupLayout`): for a weight
``[O, I]`` grouped along dim 1 in ``k`` groups, ``value_`` is ``[O, k, I/k]`` and ``scale_``,
``zero_point_`` are ``[O, k, 1]``. ``value``, ``scale``, ``zero_point`` are the expanded
``[O, I]`` tensors (padding removed), computed on access.

A quant tensor keeps what the op returned: the layout object the op built, and, where the op
produced them (the quantize op: ``QuantProxy.quantized``), the element codes and scale codes, which
:meth:`GroupwiseFields.codes_` and :meth:`GroupwiseFields.to_group_quantized` hand on as they are.
Only a tensor whose op gave values alone (the fake-quant pass, scales from a scale module) has its
codes read back off its values (:mod:`.elements`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..formats import E8M0, ElementFormat, ScaleFormat
from ..ops import GroupLayout, GroupQuantized, encode_scale
from ..ops.denormals import keeping_denormals

__all__ = ["GroupwiseFields"]


@dataclass(frozen=True, eq=False)
class GroupwiseFields:
    """Contracted tensors and the layout they came from.

    Fields:
        value_: dequantized values, contracted (the input's dtype; carries the gradient).
        scale_: float32 scales ``[.., k, 1, ..]``.
        zero_point_: like ``scale_`` (0 for groupquant's quantizers).
        layout: the :class:`groupquant.ops.GroupLayout` the op used (original shape, grouped dim,
            block size); ``group_size`` and ``group_dim`` (Brevitas's names) are read off it.
        tensor_scale_ (keyword): the per-tensor float32 second scale ``g`` (0-d) of two-level
            scaling (NVFP4), or None: ``value_ = (element * scale_) * tensor_scale_``.
        scale_format (keyword): the number format of ``scale_`` (E8M0 for MX, UE4M3 for NVFP4).
        op_codes_ (keyword): the element codes the quantize op returned (contracted), or None
            where the op gave values only.
        op_scale_codes_ (keyword): the scale codes it returned with them (None for float32 /
            bfloat16 scales, or without ``op_codes_``).
    """

    value_: torch.Tensor
    scale_: torch.Tensor
    zero_point_: torch.Tensor
    layout: GroupLayout
    tensor_scale_: Optional[torch.Tensor] = field(default=None, kw_only=True)
    scale_format: ScaleFormat = field(default=E8M0, kw_only=True)
    op_codes_: Optional[torch.Tensor] = field(default=None, kw_only=True)
    op_scale_codes_: Optional[torch.Tensor] = field(default=None, kw_only=True)

    #: Read off the layout: elements per group and the grouped dim (non-negative; Brevitas's names),
    #: the number of groups, the original shape (before padding).
    group_size = property(lambda self: self.layout.block_size)
    group_dim = property(lambda self: self.layout.dim)
    num_groups = property(lambda self: self.layout.num_groups)
    shape = property(lambda self: torch.Size(self.layout.shape))

    @property
    def value(self) -> torch.Tensor:
        """Dequantized values in the original shape (a view of ``value_``, made once, unless padded)."""
        memo = self.__dict__.get("_value")
        if memo is None:
            memo = self.layout.expand(self.value_)
            object.__setattr__(self, "_value", memo)
        return memo

    @property
    def scale(self) -> torch.Tensor:
        """The scale of every element, original shape (materialized on access)."""
        return self.layout.expand_scale(self.scale_)

    @property
    def zero_point(self) -> torch.Tensor:
        """The zero point of every element, original shape (materialized on access)."""
        return self.layout.expand_scale(self.zero_point_)

    fmt: ElementFormat

    def shared_scale_(self) -> torch.Tensor:
        """The per-group scale ``X`` that multiplies element values on the format's grid (float32,
        exactly as the op produced it; the tensor scale, if any, multiplies after it)."""
        return self.scale_.detach().float()

    def _block_value_(self) -> torch.Tensor:
        """``value_ / tensor_scale_`` (float32; ``value_`` itself without a tensor scale): what the
        block scales multiply, close enough to ``element * scale_`` for codes to round back exactly."""
        if self.tensor_scale_ is None:
            return self.value_
        return self.value_.detach().float() / self.tensor_scale_.detach().float()

    def _elements_from_values(self, to_elements: Callable[..., torch.Tensor]) -> torch.Tensor:
        """``to_elements(value_ / tensor_scale_, scale_, zero_point_, fmt)`` with subnormals kept: under
        ``torch.set_flush_denormal(True)`` float32 arithmetic reads a subnormal ``value_`` (a tiny
        block under NVFP4's tensor scale, an E8M0 scale of 2**-127) as 0 and would give other codes
        than the op produced."""
        return keeping_denormals(lambda: to_elements(self._block_value_(), self.scale_, self.zero_point_, self.fmt))

    def codes_(self) -> torch.Tensor:
        """Element codes, contracted: the op's own where it returned them, else read off the values."""
        return self.op_codes_ if self.op_codes_ is not None else self._codes_from_values()

    def _codes_from_values(self) -> torch.Tensor:
        """Element codes read back off ``value_`` and ``scale_`` (:mod:`.elements`), contracted."""
        raise NotImplementedError

    def codes(self) -> torch.Tensor:
        """Element codes in the original shape."""
        return self.layout.expand(self.codes_())

    def to_group_quantized(self) -> GroupQuantized:
        """Element codes and shared scales as :class:`groupquant.ops.GroupQuantized` (what
        ``groupquant.quantize`` returns): codes ``[O, k, I/k]``, float32 scales ``X``
        ``[O, k, 1]``, their codes in :attr:`scale_format` (None for float32 / bfloat16 scales)
        and the tensor scale. ``result.dequantize()`` equals :attr:`value`."""
        shared = self.shared_scale_().detach().float()
        ts = None if self.tensor_scale_ is None else self.tensor_scale_.detach().float()
        if self.op_codes_ is not None:
            scale_codes = self.op_scale_codes_
        else:
            scale_codes = keeping_denormals(lambda: encode_scale(shared, self.scale_format))
        return GroupQuantized(codes=self.codes_(), scale=shared, scale_codes=scale_codes, fmt=self.fmt,
                              layout=self.layout, dtype=self.value_.dtype, scale_format=self.scale_format,
                              tensor_scale=ts)
