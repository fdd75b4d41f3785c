"""Quantized backward GEMMs: each operand of each backward GEMM quantized from its high-precision
tensor, grouped along that GEMM's reduction dim (never quantize-dequantize-quantize).

For ``C = A @ B`` (a linear layer is ``A = x``, ``B = W^T``; a convolution its im2col view):

- forward:  ``C = Q(A | K) @ Q(B | K)`` (the layer's forward proxies; their own STE gives the
  gradient to the forward operands, learned scales included);
- ``dA = Q(dC | N) @ Q(B | N)^T`` (``grad_output_quant`` and the B-for-grad-A quantizer);
- ``dB = Q(A | M)^T @ Q(dC | M)`` (the A-for-grad-B and grad-output-for-grad-B quantizers).

A linear layer with ``x`` ``[..., I]`` and ``W`` ``[O, I]``: ``dX = Q(dY | O) Q(W | O)``, ``dW =
Q(dY | tokens)^T Q(x | tokens)`` (tokens: every leading dim, flattened). A convolution (im2col):
``dX`` reduces over the output channels (``dY`` and ``W`` grouped along their dim 0 / 1 channel
dims: ``Q(dY | C_out)``, ``Q(W | C_out)``), ``dW`` over batch and positions (``dY`` and ``x``
grouped along the batch dim 0, as microxcaling's convolution does: a block lies inside the
reduction). A proxy of None keeps that operand in high precision. The autograd functions here
save the high-precision ``x`` and ``W`` (what a float layer saves), never the quantized copies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch.autograd.function import once_differentiable

from ..proxy import QuantProxy
from .lean_gemm import GemmOp

__all__ = ["BackwardOperands", "quantized_backward_gemm", "quantized_backward_matmul"]


@dataclass(frozen=True, eq=False)
class BackwardOperands:
    """The four backward operand quantizers of one GEMM (None: high precision).

    grad_output: ``dC`` in the GEMM giving the gradient of A (the input).
    b_for_grad_a: ``B`` (the weight) in that GEMM.
    grad_output_for_grad_b: ``dC`` in the GEMM giving the gradient of B (the weight).
    a_for_grad_b: ``A`` (the input) in that GEMM.
    """

    grad_output: Optional[QuantProxy] = None
    b_for_grad_a: Optional[QuantProxy] = None
    grad_output_for_grad_b: Optional[QuantProxy] = None
    a_for_grad_b: Optional[QuantProxy] = None


def _q(proxy: Optional[QuantProxy], t: torch.Tensor) -> torch.Tensor:
    """``t`` quantized by ``proxy`` (its dims are the GEMM's), or ``t`` itself."""
    return t if proxy is None else proxy.quant_value(t)


class _QuantizedBackwardGemm(torch.autograd.Function):
    """``op(xq, wq, b)`` whose backward GEMMs re-quantize ``x`` / ``W`` / ``dY`` per :class:`BackwardOperands`."""

    @staticmethod
    def forward(ctx, xq: torch.Tensor, wq: torch.Tensor, bias: Optional[torch.Tensor], x: torch.Tensor,  # type: ignore[override]
                w: torch.Tensor, ops: BackwardOperands, op: GemmOp) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.ops, ctx.op, ctx.has_bias = ops, op, bias is not None
        ctx.x_shape = xq.shape
        return op.forward(xq, wq, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        x, w = ctx.saved_tensors
        ops, op = ctx.ops, ctx.op
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = ctx.has_bias and ctx.needs_input_grad[2]
        if op.kind == "linear":
            return _linear_backward(grad, x, w, ops, need_x, need_w, need_b) + (None, None, None, None)
        return _conv_backward(grad, x, w, ops, op, need_x, need_w, need_b) + (None, None, None, None)


def _linear_backward(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor, ops: BackwardOperands, need_x: bool,
                     need_w: bool, need_b: bool) -> Tuple[Optional[torch.Tensor], ...]:
    """dX = Q(dY | out) Q(W | out); dW = Q(dY | tokens)^T Q(x | tokens); db = sum of dY."""
    g2 = grad.reshape(-1, grad.shape[-1])
    grad_x = grad_w = None
    w_for_x = None
    if need_x:
        w_for_x = _q(ops.b_for_grad_a, w)
        grad_x = _q(ops.grad_output, g2).mm(w_for_x).reshape(x.shape)
    if need_w:
        x2 = x.reshape(-1, x.shape[-1])
        reuse = (w_for_x is not None and w_for_x is not w and w_for_x.dtype == grad.dtype and w_for_x.is_contiguous()
                 and not torch.compiler.is_compiling())
        grad_w = torch.mm(_q(ops.grad_output_for_grad_b, g2).t(), _q(ops.a_for_grad_b, x2),
                          out=w_for_x if reuse else None)  # over the no longer needed Q(W | out)
    return grad_x, grad_w, g2.sum(0) if need_b else None


def _conv_backward(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor, ops: BackwardOperands, op: GemmOp,
                   need_x: bool, need_w: bool, need_b: bool) -> Tuple[Optional[torch.Tensor], ...]:
    """dX from Q(dY | C_out) and Q(W | C_out); dW, db from Q(dY | batch) and Q(x | batch)."""
    grad_x = grad_w = grad_b = None
    if need_x:
        grad_x = op.conv_backward(_q(ops.grad_output, grad), x, _q(ops.b_for_grad_a, w), (True, False, False), None)[0]
    if need_w:
        grad_w = op.conv_backward(_q(ops.grad_output_for_grad_b, grad), _q(ops.a_for_grad_b, x), w,
                                  (False, True, False), None)[1]
    if need_b:
        grad_b = grad.sum(dim=[d for d in range(grad.dim()) if d != 1])
    return grad_x, grad_w, grad_b


def quantized_backward_gemm(xq: torch.Tensor, wq: torch.Tensor, bias: Optional[torch.Tensor], x: torch.Tensor,
                            w: torch.Tensor, ops: BackwardOperands, op: GemmOp) -> torch.Tensor:
    """``op(xq, wq, bias)`` (xq, wq: the forward-quantized operands, with their own gradients)
    whose backward quantizes each backward GEMM's operands from ``x`` and ``w`` (high precision)."""
    return _QuantizedBackwardGemm.apply(xq, wq, bias, x.detach(), w.detach(), ops, op)


class _QuantizedBackwardMatMul(torch.autograd.Function):
    """``aq @ bq`` with dA = Q(dC | N) Q(B | N)^T and dB = Q(A | M)^T Q(dC | M)."""

    @staticmethod
    def forward(ctx, aq: torch.Tensor, bq: torch.Tensor, a: torch.Tensor, b: torch.Tensor,  # type: ignore[override]
                ops: BackwardOperands) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.ops = ops
        return torch.matmul(aq, bq)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        a, b = ctx.saved_tensors
        ops = ctx.ops
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a = torch.matmul(_q(ops.grad_output, grad), _q(ops.b_for_grad_a, b).transpose(-1, -2))
            grad_a = grad_a.sum_to_size(a.shape)
        if ctx.needs_input_grad[1]:
            grad_b = torch.matmul(_q(ops.a_for_grad_b, a).transpose(-1, -2), _q(ops.grad_output_for_grad_b, grad))
            grad_b = grad_b.sum_to_size(b.shape)
        return grad_a, grad_b, None, None, None


def quantized_backward_matmul(aq: torch.Tensor, bq: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                              ops: BackwardOperands) -> torch.Tensor:
    """``torch.matmul(aq, bq)`` (both at least 2-D) whose backward quantizes from ``a`` and ``b``."""
    return _QuantizedBackwardMatMul.apply(aq, bq, a.detach(), b.detach(), ops)
