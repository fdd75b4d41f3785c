"""QuantIdentity and QuantReLU: activation quantization points.

Both take Brevitas's ``act_quant=`` as well as groupquant's ``output_quant=``: they are one slot,
the quantizer applied after the activation (Brevitas's ``QuantReLU(act_quant=Q)`` quantizes
``relu(x)``; its ``QuantIdentity(act_quant=Q)`` quantizes ``x``). As in Brevitas, keywords
without a prefix set that quantizer (``QuantReLU(act_quant=Q, bit_width=4)``); ``act_`` and
``output_`` prefixes say the same, ``input_`` reaches ``input_quant``. Unlike Brevitas, a
keyword no quantizer knows fails (with a did-you-mean), and the defaults stay float (None) where
Brevitas defaults to 8-bit integer quantizers.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ...quant_tensor import QuantTensor, plain
from .keywords import UNSET, resolve_act_quant, route_act_keywords
from .quant_layer import QuantLayerMixin

__all__ = ["QuantIdentity", "QuantReLU"]


def _init_act_layer(layer: QuantLayerMixin, act_quant: Any, input_quant: Optional[type],
                    output_quant: Optional[type], feature_dim: int, return_quant_tensor: bool,
                    quant_kwargs: Any) -> None:
    """Build ``layer``'s proxies from Brevitas-style or groupquant-style arguments (module doc)."""
    context = type(layer).__name__
    output_quant = resolve_act_quant(act_quant, output_quant, context)
    routed = route_act_keywords(quant_kwargs, input_quant, output_quant, context)
    layer._init_quant(input_quant=input_quant, output_quant=output_quant, feature_dim=feature_dim,
                      return_quant_tensor=return_quant_tensor, has_weight=False, quant_kwargs=routed)


class QuantIdentity(QuantLayerMixin, nn.Identity):
    """Quantizes what passes through: ``output_quant(input_quant(x))`` (usually one of them).

    ``act_quant`` is Brevitas's name for ``output_quant`` (give one); unprefixed keywords set it.
    Groups and channels run along ``feature_dim`` (default -1, the last dim; 1 for NCHW maps)
    where the quantizer leaves the dim to the layer.
    """

    def __init__(self, *, act_quant: Any = UNSET, input_quant: Optional[type] = None,
                 output_quant: Optional[type] = None, feature_dim: int = -1, return_quant_tensor: bool = False,
                 **quant_kwargs: Any) -> None:
        nn.Identity.__init__(self)
        _init_act_layer(self, act_quant, input_quant, output_quant, feature_dim, return_quant_tensor, quant_kwargs)

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        return self._finish(plain(self.input_quant(x)))


class QuantReLU(QuantLayerMixin, nn.ReLU):
    """Drop-in ``nn.ReLU(inplace=False)``: ``output_quant(relu(input_quant(x)))``.

    ``act_quant`` is Brevitas's name for ``output_quant`` (give one); unprefixed keywords set it.
    """

    def __init__(self, inplace: bool = False, *, act_quant: Any = UNSET, input_quant: Optional[type] = None,
                 output_quant: Optional[type] = None, feature_dim: int = -1, return_quant_tensor: bool = False,
                 **quant_kwargs: Any) -> None:
        nn.ReLU.__init__(self, inplace)
        _init_act_layer(self, act_quant, input_quant, output_quant, feature_dim, return_quant_tensor, quant_kwargs)

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        return self._finish(F.relu(plain(self.input_quant(x)), inplace=self.inplace))
