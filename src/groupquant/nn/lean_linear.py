"""A linear op on a fake-quantized weight that frees the quantized weight halfway through backward.

``F.linear(xq, fake_quant(W), b)`` through plain autograd keeps the quantized weight ``Wq`` (a
second weight-sized float tensor) alive until the whole backward of the layer has run, so it
coexists with the weight gradient: peak memory ~ ``W + Wq + dW``, against ``W + dW`` for a float
layer. :func:`lean_quant_linear` computes the same forward, and in backward uses ``Wq`` for the
input gradient first, then writes the weight gradient into ``Wq``'s buffer: peak ~ ``W + Wq``,
and the weight gradient needs no fresh allocation (whose first touch of new pages costs about as
much as the fake-quant kernel itself on a CPU). The arithmetic is the same (same GEMMs, same
operands), so outputs and gradients are equal to the plain path bit for bit. The backward runs
once (no ``retain_graph``) and is not itself differentiable.

It applies where the weight's gradient is the straight-through identity: a
:class:`groupquant.core.DynamicQuant` weight quantizer (abs-max scales, MX) with ``ste='identity'``.
Any other weight quantizer (learned or running scales, the clipped STE) takes the plain path.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ..core import DynamicQuant, DynamicQuantSettings, dynamic_fake_quant

__all__ = ["lean_quant_linear", "lean_applies"]


def lean_applies(weight_quant: Optional[torch.nn.Module]) -> bool:
    """Whether a weight quant module lets :func:`lean_quant_linear` replace the plain path."""
    return type(weight_quant) is DynamicQuant and weight_quant.ste == "identity"


class _LeanQuantLinear(torch.autograd.Function):
    """``F.linear(xq, Wq, b)`` with ``Wq`` = the dynamic fake-quant of ``W`` and identity gradient to ``W``.

    Saves ``xq`` (as plain autograd would) and keeps ``Wq`` on ctx for backward, which uses it
    for the input gradient and then writes the weight gradient into its buffer.
    """

    @staticmethod
    def forward(ctx, xq: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],  # type: ignore[override]
                settings: DynamicQuantSettings) -> torch.Tensor:
        wq = dynamic_fake_quant(weight, settings).value
        ctx.save_for_backward(xq)
        ctx.wq = wq  # an intermediate without grad history: reused in backward for the weight gradient
        ctx.has_bias = bias is not None
        return F.linear(xq, wq, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        (xq,) = ctx.saved_tensors
        wq = ctx.wq
        if wq is None:
            raise RuntimeError("QuantLinear's memory-lean backward frees the quantized weight and cannot run twice "
                               "(retain_graph=True); set layer.memory_lean_backward = False for that")
        ctx.wq = None
        grad_x = grad.matmul(wq) if ctx.needs_input_grad[0] else None
        grad2d = grad.reshape(-1, grad.shape[-1])
        grad_w = None
        if ctx.needs_input_grad[1]:
            # the weight gradient is written over the quantized weight, no longer needed: no second
            # weight-sized buffer, and no fresh pages to fault in
            reuse = wq.dtype == grad.dtype and wq.is_contiguous() and not torch.compiler.is_compiling()
            grad_w = torch.mm(grad2d.t(), xq.reshape(-1, xq.shape[-1]), out=wq if reuse else None)
        del wq
        grad_b = grad2d.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b, None


def lean_quant_linear(xq: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                      weight_quant: DynamicQuant) -> torch.Tensor:
    """``F.linear(xq, weight_quant(weight).value, bias)`` with the memory-lean backward above.

    ``xq``: the (already quantized) input ``[..., in_features]``; ``weight``: ``[out, in]``;
    ``weight_quant``: a module for which :func:`lean_applies` holds.
    """
    return _LeanQuantLinear.apply(xq, weight, bias, weight_quant.settings)
