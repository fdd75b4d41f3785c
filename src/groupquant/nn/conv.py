"""QuantConv1d / QuantConv2d: convolutions with quantized weight, bias, input and output."""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import nn

from ..quant_tensor import QuantTensor
from .lean_gemm import GemmOp
from .quant_layer import QuantLayerMixin

__all__ = ["QuantConv1d", "QuantConv2d"]

_DOC = """Drop-in ``nn.Conv{n}d``: the same arguments, plus quantizers (None means float).

    Weights ``[O, I/groups, k...]`` group along dim 1 (input channels); activations along the
    channel dim 1. Prefixed keywords reach a quantizer (``weight_group_size=16``).
    """


class _QuantConvMixin(QuantLayerMixin):
    """Shared forward: quantize input, weight, bias; convolve; quantize the output."""

    def _gemm_op(self) -> GemmOp:
        """The convolution as the shared weight-layer route runs it: zero padding given as ints
        goes through :class:`GemmOp` (lean backward where it applies); other padding modes or
        ``padding='same'`` through the layer's own ``_conv_forward``."""
        if self.padding_mode == "zeros" and not isinstance(self.padding, str):  # type: ignore[attr-defined]
            return GemmOp("conv", tuple(self.stride), tuple(self.padding), tuple(self.dilation),  # type: ignore[attr-defined]
                          self.groups)  # type: ignore[attr-defined]
        return GemmOp("module", module=self)

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        return self._quant_gemm(x, self._gemm_op())


class QuantConv1d(_QuantConvMixin, nn.Conv1d):
    __doc__ = _DOC.format(n=1)

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None, *, weight_quant: Optional[type] = None,
                 input_quant: Optional[type] = None, output_quant: Optional[type] = None,
                 bias_quant: Optional[type] = None, return_quant_tensor: bool = False, **quant_kwargs: Any) -> None:
        nn.Conv1d.__init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                           padding_mode, device, dtype)
        self._init_quant(weight_quant=weight_quant, bias_quant=bias_quant, input_quant=input_quant,
                         output_quant=output_quant, feature_dim=1, return_quant_tensor=return_quant_tensor,
                         quant_kwargs=quant_kwargs)


class QuantConv2d(_QuantConvMixin, nn.Conv2d):
    __doc__ = _DOC.format(n=2)

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None, *, weight_quant: Optional[type] = None,
                 input_quant: Optional[type] = None, output_quant: Optional[type] = None,
                 bias_quant: Optional[type] = None, return_quant_tensor: bool = False, **quant_kwargs: Any) -> None:
        nn.Conv2d.__init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                           padding_mode, device, dtype)
        self._init_quant(weight_quant=weight_quant, bias_quant=bias_quant, input_quant=input_quant,
                         output_quant=output_quant, feature_dim=1, return_quant_tensor=return_quant_tensor,
                         quant_kwargs=quant_kwargs)
