"""QuantLinear: nn.Linear with quantized weight, bias, input and output."""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import nn

from ...quant_tensor import QuantTensor
from ..gemm.gemm_op import LINEAR, GemmOp
from .quant_layer import QuantLayerMixin

__all__ = ["QuantLinear"]


class QuantLinear(QuantLayerMixin, nn.Linear):
    """Drop-in ``nn.Linear``: the same arguments, plus quantizers (None means float).

    ``y = output_quant(F.linear(input_quant(x), weight_quant(W), bias_quant(b)))``. Settings
    reach a quantizer through prefixed keywords: ``weight_bit_width=4``, ``input_group_size=16``.
    Activations group along the last dim (the features), weights along the input features.

    Example::

        layer = QuantLinear(1024, 1024, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act)

    In eval mode the quantized weight is cached until the weight changes (see
    :class:`groupquant.proxy.WeightQuantProxy`); training uses the memory-lean backward where it
    applies (see :class:`QuantLayerMixin`).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None,
                 *, weight_quant: Optional[type] = None, input_quant: Optional[type] = None,
                 output_quant: Optional[type] = None, bias_quant: Optional[type] = None,
                 return_quant_tensor: bool = False, **quant_kwargs: Any) -> None:
        nn.Linear.__init__(self, in_features, out_features, bias, device, dtype)
        self._init_quant(weight_quant=weight_quant, bias_quant=bias_quant, input_quant=input_quant,
                         output_quant=output_quant, feature_dim=-1, return_quant_tensor=return_quant_tensor,
                         quant_kwargs=quant_kwargs)

    def gemm_op(self) -> GemmOp:
        """``F.linear``."""
        return LINEAR

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        return self._quant_gemm(x, self.gemm_op())
