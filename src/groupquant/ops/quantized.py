"""The result of :func:`groupquant.quantize`: element codes and shared scales, contracted."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..formats import E8M0, ElementFormat, ScaleFormat
from .codes import decode
from .denormals import keeping_denormals
from .group_layout import GroupLayout

__all__ = ["GroupQuantized"]


@dataclass(frozen=True)
class GroupQuantized:
    """Group-quantized data in the contracted layout (see :class:`GroupLayout`).

    Fields:
        codes: element codes (integers of the format's encoding), shape ``layout.contracted_shape``.
        scale: float32 shared scales, shape ``layout.scale_shape`` (NaN for a NaN/Inf group).
        scale_codes: uint8 codes of ``scale`` in ``scale_format`` (E8M0 / E{k}M0 exponent codes,
            UE4M3 bytes; shape ``layout.scale_shape``), or None for float32 / bfloat16 scales.
        fmt: the element format.
        layout: shape, grouped dim and block size of the original tensor.
        dtype: the original dtype, restored by :meth:`dequantize`.
        scale_format: the scale's number format (E8M0 for MX).
        tensor_scale: the per-tensor float32 second scale (0-d) of two-level scaling, or None.
    """

    codes: torch.Tensor
    scale: torch.Tensor
    scale_codes: Optional[torch.Tensor]
    fmt: ElementFormat
    layout: GroupLayout
    dtype: torch.dtype
    scale_format: ScaleFormat = E8M0
    tensor_scale: Optional[torch.Tensor] = None

    #: Read off the layout: the original tensor's shape, elements per group (the whole dim's size
    #: when grouped over all of it), the grouped dim (non-negative).
    shape = property(lambda self: torch.Size(self.layout.shape))
    block_size = property(lambda self: self.layout.block_size)
    dim = property(lambda self: self.layout.dim)

    def element_values(self) -> torch.Tensor:
        """Element values (codes decoded, before scaling), float32, contracted."""
        return decode(self.codes, self.fmt)

    def dequantize(self) -> torch.Tensor:
        """``(element * scale) * tensor_scale`` in the original shape and dtype: equal to ``fake_quant``
        of the input (subnormal products kept whatever ``torch.set_flush_denormal`` says)."""
        return keeping_denormals(lambda: self.layout.expand(self._dequantized()).to(self.dtype))

    def _dequantized(self) -> torch.Tensor:
        """Contracted float32 ``(element * scale) * tensor_scale``."""
        out = self.element_values() * self.scale
        return out if self.tensor_scale is None else out * self.tensor_scale

    def to(self, device: torch.device) -> "GroupQuantized":
        """A copy on another device."""
        sc = None if self.scale_codes is None else self.scale_codes.to(device)
        ts = None if self.tensor_scale is None else self.tensor_scale.to(device)
        return GroupQuantized(codes=self.codes.to(device), scale=self.scale.to(device), scale_codes=sc, fmt=self.fmt,
                              layout=self.layout, dtype=self.dtype, scale_format=self.scale_format, tensor_scale=ts)
