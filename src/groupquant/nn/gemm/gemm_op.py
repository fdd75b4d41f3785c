"""GemmOp: which op a quant layer's weight enters (linear, or a convolution with its geometry)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["GemmOp", "LINEAR", "autocast_enabled"]

_CONVS = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}  # by the weight's number of dims


#: Device types with an autocast (torch's list); torch.is_autocast_enabled raises for others (``meta``).
AUTOCAST_DEVICE_TYPES = ("cpu", "cuda", "xpu", "hpu", "mps", "xla", "ipu", "mtia", "privateuseone")


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (False for device types without autocast, such
    as ``meta``, where torch's own query raises). A tuple test, not torch.amp.is_autocast_available,
    which torch 2.11's dynamo cannot trace (a graph break in every compiled quant layer)."""
    return device_type in AUTOCAST_DEVICE_TYPES and torch.is_autocast_enabled(device_type)


@dataclass(frozen=True)
class GemmOp:
    """Which op the weight enters: ``linear``; ``conv`` with its geometry (zero padding given as
    ints); or ``module``: the layer's own ``_conv_forward`` (other padding modes), plain path only.
    A subclass whose weight operand is stored quantized (``stores_weight``: the packed GEMM of
    :mod:`groupquant.nn.gemm.packed_gemm_op`) takes that storage as it is, with no weight quantizer."""

    #: whether the weight operand is quantized storage the op decodes itself (no weight quantizer)
    stores_weight: ClassVar[bool] = False

    kind: str = "linear"
    stride: Tuple[int, ...] = ()
    padding: Tuple[int, ...] = ()
    dilation: Tuple[int, ...] = ()
    groups: int = 1
    module: Any = field(default=None, compare=False, repr=False)

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
        if self.kind == "linear":
            return F.linear(x, w, b)
        if self.kind == "module":
            return self.module._conv_forward(x, w, b)
        conv = _CONVS[w.dim()]
        return conv(x, w, b, self.stride, self.padding, self.dilation, self.groups)

    def bias_grad(self, grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor, as_autograd: bool) -> torch.Tensor:
        """The bias gradient: ``grad`` summed over every dim but the output features / channels.
        A convolution's in ``aten.convolution_backward``'s order when ``as_autograd`` (what plain
        autograd gives, bit for bit), else as ``grad.sum`` over those dims."""
        if self.kind == "linear":
            return grad.reshape(-1, grad.shape[-1]).sum(0)
        if as_autograd:
            return self.conv_backward(grad, x, w, (False, False, True), [w.shape[0]])[2]
        return grad.sum(dim=[d for d in range(grad.dim()) if d != 1])

    def lean_supported(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        """Whether the lean backward implements this call (linear; batched zero-padded conv)."""
        return self.kind == "linear" or (self.kind == "conv" and x.dim() == w.dim())

    def conv_backward(self, grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor, mask: Tuple[bool, bool, bool],
                      bias_sizes: Optional[list]) -> Tuple[Optional[torch.Tensor], ...]:
        """``aten.convolution_backward`` for the outputs in ``mask`` (input, weight, bias)."""
        zeros = [0] * len(self.stride)
        return torch.ops.aten.convolution_backward(grad, x, w, bias_sizes, list(self.stride), list(self.padding),
                                                   list(self.dilation), False, zeros, self.groups, list(mask))


LINEAR = GemmOp()
