"""QuantIdentity and QuantReLU: activation quantization points."""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..quant_tensor import QuantTensor, plain
from .quant_layer import QuantLayerMixin

__all__ = ["QuantIdentity", "QuantReLU"]


class QuantIdentity(QuantLayerMixin, nn.Identity):
    """Quantizes what passes through: ``output_quant(input_quant(x))`` (usually one of them).

    Groups and channels run along ``feature_dim`` (default -1, the last dim; 1 for NCHW maps)
    where the quantizer leaves the dim to the layer.
    """

    def __init__(self, *, input_quant: Optional[type] = None, output_quant: Optional[type] = None,
                 feature_dim: int = -1, return_quant_tensor: bool = False, **quant_kwargs: Any) -> None:
        nn.Identity.__init__(self)
        self._init_quant(input_quant=input_quant, output_quant=output_quant, feature_dim=feature_dim,
                         return_quant_tensor=return_quant_tensor, has_weight=False, quant_kwargs=quant_kwargs)

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        return self._finish(plain(self.input_quant(x)))


class QuantReLU(QuantLayerMixin, nn.ReLU):
    """Drop-in ``nn.ReLU(inplace=False)``: ``output_quant(relu(input_quant(x)))``."""

    def __init__(self, inplace: bool = False, *, input_quant: Optional[type] = None,
                 output_quant: Optional[type] = None, feature_dim: int = -1, return_quant_tensor: bool = False,
                 **quant_kwargs: Any) -> None:
        nn.ReLU.__init__(self, inplace)
        self._init_quant(input_quant=input_quant, output_quant=output_quant, feature_dim=feature_dim,
                         return_quant_tensor=return_quant_tensor, has_weight=False, quant_kwargs=quant_kwargs)

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        return self._finish(F.relu(plain(self.input_quant(x)), inplace=self.inplace))
