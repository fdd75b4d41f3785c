"""A linear or convolution op on a fake-quantized weight that frees the quantized weight halfway
through backward.

``F.linear(xq, Wq, b)`` through plain autograd keeps the quantized weight ``Wq`` (a second
weight-sized float tensor) alive until the whole backward of the layer has run, so it coexists
with the weight gradient: peak memory ~ ``W + Wq + dW``, against ``W + dW`` for a float layer.
:func:`lean_quant_gemm` computes the same forward with ``Wq`` from the layer's own weight proxy
(the same spec and module as the plain path), and in backward uses ``Wq`` for the input gradient
first, then frees it before the weight gradient (a linear layer writes the weight gradient into
``Wq``'s buffer: no fresh allocation, whose first touch of new pages costs about as much as the
fake-quant kernel itself on a CPU). The arithmetic is the same (same GEMMs, same operands), so
outputs and gradients equal the plain path bit for bit. The backward runs once (no
``retain_graph``) and is not itself differentiable.

It applies where the weight's gradient is the straight-through identity: a dynamic (abs-max,
MX) weight quantizer with ``ste='identity'`` (:func:`lean_applies`); any other weight quantizer
(learned or running scales, the clipped STE) takes the plain path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ..proxy import WeightQuantProxy

__all__ = ["GemmOp", "LINEAR", "lean_quant_gemm", "lean_applies"]


@dataclass(frozen=True)
class GemmOp:
    """Which op the weight enters: ``linear``; ``conv`` with its geometry (zero padding given as
    ints); or ``module``: the layer's own ``_conv_forward`` (other padding modes), plain path only."""

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
        conv = F.conv1d if w.dim() == 3 else F.conv2d
        return conv(x, w, b, self.stride, self.padding, self.dilation, self.groups)

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


def lean_applies(weight_quant: WeightQuantProxy) -> bool:
    """Whether a weight proxy lets :func:`lean_quant_gemm` replace the plain path."""
    spec = weight_quant.spec
    return spec is not None and spec.is_dynamic and spec.ste == "identity"


class _LeanQuantGemm(torch.autograd.Function):
    """``op(xq, Wq, b)`` with ``Wq = weight_quant.quant_value(W)`` and identity gradient to ``W``."""

    @staticmethod
    def forward(ctx, xq: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],  # type: ignore[override]
                weight_quant: WeightQuantProxy, op: GemmOp) -> torch.Tensor:
        wq = weight_quant.quant_value(weight)
        ctx.save_for_backward(xq, weight)
        ctx.wq = wq  # an intermediate without grad history: freed in backward before the weight gradient
        ctx.has_bias, ctx.op = bias is not None, op
        return op.forward(xq, wq, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        xq, weight = ctx.saved_tensors
        wq = ctx.wq
        if wq is None:
            raise RuntimeError("the memory-lean backward of a quant layer frees the quantized weight and cannot run "
                               "twice (retain_graph=True); set layer.memory_lean_backward = False for that")
        ctx.wq = None
        need_x, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]
        if ctx.op.kind == "linear":
            grad_x = grad.matmul(wq) if need_x else None
            grad2d = grad.reshape(-1, grad.shape[-1])
            grad_w = None
            if need_w:
                reuse = wq.dtype == grad.dtype and wq.is_contiguous() and not torch.compiler.is_compiling()
                grad_w = torch.mm(grad2d.t(), xq.reshape(-1, xq.shape[-1]), out=wq if reuse else None)
            del wq
            return grad_x, grad_w, grad2d.sum(0) if need_b else None, None, None
        grad_x = ctx.op.conv_backward(grad, xq, wq, (need_x, False, False), None)[0] if need_x else None
        del wq
        grad_w = grad_b = None
        if need_w or need_b:
            bias_sizes = [weight.shape[0]] if need_b else None
            _, grad_w, grad_b = ctx.op.conv_backward(grad, xq, weight, (False, need_w, need_b), bias_sizes)
        return grad_x, grad_w, grad_b, None, None


def lean_quant_gemm(xq: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                    weight_quant: WeightQuantProxy, op: GemmOp = LINEAR) -> torch.Tensor:
    """``op(xq, weight_quant.quant_value(weight), bias)`` with the memory-lean backward above.

    ``xq``: the (already quantized) input; ``weight``: the float weight; ``weight_quant``: a proxy
    for which :func:`lean_applies` holds.
    """
    return _LeanQuantGemm.apply(xq, weight, bias, weight_quant, op)
