"""What :func:`groupquant.ops.fake_quant_with_scale` and the core quant modules return: dequantized
values and their scales (one record for both)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .group_layout import GroupLayout
from .quantized import GroupQuantized

__all__ = ["FakeQuantResult"]


@dataclass(frozen=True)
class FakeQuantResult:
    """Fake-quant values and the shared scale of every group, from one pass over the input.

    Fields:
        value: ``fake_quant(x, ...)``: x's shape and dtype, carrying the straight-through gradient.
        scale: float32 shared scales in the contracted scale shape ``S[:d] + (k, 1) + S[d+1:]``
            (:attr:`GroupLayout.scale_shape`); equal to ``quantize(x, ...).scale`` (NaN for a
            group holding NaN/Inf). No gradient (a learned scale carries its own).
        layout: the group layout when ``value`` is kept contracted (``layout.contracted_shape``,
            core modules with group scales), else None (``value`` in the input's shape; per-tensor
            scales are 0-d, per-channel ones keepdim).
        tensor_scale: the per-tensor float32 second scale ``g`` (0-d) of two-level scaling
            (NVFP4), or None: ``value == (element * scale) * tensor_scale``.
        codes / scale_codes: the element codes (contracted) and scale codes as the quantize op
            returned them (:meth:`from_quantized`), or None where the op gave values only.
    """

    value: torch.Tensor
    scale: torch.Tensor
    layout: Optional[GroupLayout] = None
    tensor_scale: Optional[torch.Tensor] = None
    codes: Optional[torch.Tensor] = None
    scale_codes: Optional[torch.Tensor] = None

    @classmethod
    def from_quantized(cls, q: "GroupQuantized") -> "FakeQuantResult":
        """What the quantize op returned, as a contracted result: the dequantized values
        (``q.dequantize()`` contracted, as the fake-quant pass gives them), the scales, the layout,
        the tensor scale, and the codes and scale codes themselves."""
        value = q.layout.contract(q.dequantize())
        return cls(value, q.scale, q.layout, q.tensor_scale, codes=q.codes, scale_codes=q.scale_codes)

    @property
    def expanded_value(self) -> torch.Tensor:
        """``value`` in the input's shape (a view unless the group dim was padded)."""
        return self.value if self.layout is None else self.layout.expand(self.value)
