"""QuantConv1d / QuantConv2d / QuantConv3d: convolutions with quantized weight, bias, input and output."""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import nn

from ...quant_tensor import QuantTensor, plain
from ..gemm.gemm_op import GemmOp
from .quant_layer import QuantLayerMixin

__all__ = ["QuantConv1d", "QuantConv2d", "QuantConv3d"]

_DOC = """Drop-in ``nn.Conv{n}d``: the same arguments, plus quantizers (None means float).

    Weights ``[O, I/groups, k...]`` group along dim 1 (input channels); activations along the
    channel dim (1 for batched input, 0 for unbatched ``(C, L)`` / ``(C, H, W)``, run as a batch
    of one). Prefixed keywords reach a quantizer (``weight_group_size=16``).
    """


class _QuantConvMixin(QuantLayerMixin):
    """Shared forward: quantize input, weight, bias; convolve; quantize the output.

    Unbatched input (``(C, L)`` / ``(C, H, W)``, which torch's convolutions accept) runs as a
    batch of one, so its activations group along the channels as batched input does and the
    result equals ``layer(x[None])[0]``. With ``return_quant_tensor`` and an output quantizer,
    unbatched input is a ValueError (the quant tensor would carry the batch dim).
    """

    def gemm_op(self) -> GemmOp:
        """The convolution as the shared weight-layer route runs it: zero padding given as ints
        goes through :class:`GemmOp` (lean backward where it applies); other padding modes or
        ``padding='same'`` through the layer's own ``_conv_forward``."""
        if self.padding_mode == "zeros" and not isinstance(self.padding, str):  # type: ignore[attr-defined]
            return GemmOp("conv", tuple(self.stride), tuple(self.padding), tuple(self.dilation),  # type: ignore[attr-defined]
                          self.groups)  # type: ignore[attr-defined]
        return GemmOp("module", module=self)

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        unbatched_ndim = self.weight.dim() - 1  # type: ignore[attr-defined]
        if x.dim() != unbatched_ndim:
            return self._batched_forward(x)
        if self.return_quant_tensor and self.output_quant.is_quant_enabled:
            raise ValueError(f"{type(self).__name__}(return_quant_tensor=True) needs batched input with "
                             f"{unbatched_ndim + 1} dims; got unbatched input of shape {tuple(x.shape)}: "
                             f"add the batch dim (x[None])")
        return self._batched_forward(plain(x).unsqueeze(0)).squeeze(0)

    def _batched_forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        """The forward for input with a batch dim (channels at dim 1)."""
        return self._quant_gemm(x, self.gemm_op())


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


class QuantConv3d(_QuantConvMixin, nn.Conv3d):
    __doc__ = _DOC.format(n=3)

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None, *, weight_quant: Optional[type] = None,
                 input_quant: Optional[type] = None, output_quant: Optional[type] = None,
                 bias_quant: Optional[type] = None, return_quant_tensor: bool = False, **quant_kwargs: Any) -> None:
        nn.Conv3d.__init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                           padding_mode, device, dtype)
        self._init_quant(weight_quant=weight_quant, bias_quant=bias_quant, input_quant=input_quant,
                         output_quant=output_quant, feature_dim=1, return_quant_tensor=return_quant_tensor,
                         quant_kwargs=quant_kwargs)
