"""QuantLinear: nn.Linear with quantized weight, bias, input and output."""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..quant_tensor import QuantTensor, plain
from .lean_linear import lean_applies, lean_quant_linear
from .quant_layer import QuantLayerMixin

__all__ = ["QuantLinear"]


class QuantLinear(QuantLayerMixin, nn.Linear):
    """Drop-in ``nn.Linear``: the same arguments, plus quantizers (None means float).

    ``y = output_quant(F.linear(input_quant(x), weight_quant(W), bias_quant(b)))``. Settings
    reach a quantizer through prefixed keywords: ``weight_bit_width=4``, ``input_group_size=16``.
    Activations group along the last dim (the features), weights along the input features.

    Example::

        layer = QuantLinear(1024, 1024, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act)

    Memory in training: with a dynamic (abs-max, MX) weight quantizer and the identity STE, the
    layer runs :func:`groupquant.nn.lean_linear.lean_quant_linear`, whose backward frees the
    fake-quantized weight before the weight gradient is allocated (peak memory near a float
    layer's, same results bit for bit). Set ``memory_lean_backward = False`` on the layer (or the
    class) for the plain autograd path.
    """

    memory_lean_backward: bool = True

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None,
                 *, weight_quant: Optional[type] = None, input_quant: Optional[type] = None,
                 output_quant: Optional[type] = None, bias_quant: Optional[type] = None,
                 return_quant_tensor: bool = False, **quant_kwargs: Any) -> None:
        nn.Linear.__init__(self, in_features, out_features, bias, device, dtype)
        self._init_quant(weight_quant=weight_quant, bias_quant=bias_quant, input_quant=input_quant,
                         output_quant=output_quant, feature_dim=-1, return_quant_tensor=return_quant_tensor,
                         quant_kwargs=quant_kwargs)

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        qx = plain(self.input_quant(x))
        if self._lean(qx):
            y = lean_quant_linear(qx, self.weight, plain(self.quant_bias()), self.weight_quant.tensor_quant)
        else:
            y = F.linear(qx, plain(self.quant_weight()), plain(self.quant_bias()))
        return self._finish(y)

    def _lean(self, qx: torch.Tensor) -> bool:
        """Whether this call takes the memory-lean path: a training step (grad recorded, not
        traced for export, no autocast) whose weight quantizer lets it (see :func:`lean_applies`)."""
        if not (self.memory_lean_backward and torch.is_grad_enabled()
                and (self.weight.requires_grad or qx.requires_grad)):
            return False
        if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.is_autocast_enabled(qx.device.type):
            return False
        return lean_applies(self.weight_quant.tensor_quant)
