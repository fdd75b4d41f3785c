"""The one autograd function of a quant layer's GEMM with a backward of its own (linear and
convolution): which operands the backward GEMMs take is its configuration.

For ``C = A @ B`` (a linear layer is ``A = x``, ``B = W^T``; a convolution its im2col view), the
backward runs ``dA = G_a(dC) @ B_a^T`` and ``dB = A_b^T @ G_b(dC)``. Two configurations
(:class:`GemmBackward`):

- **quantized backward** (the layer's backward slots, :mod:`groupquant.nn.gemm.grad_slots`): each operand of each
  backward GEMM quantized from its high-precision tensor, grouped along that GEMM's reduction dim
  (never quantize-dequantize-quantize): ``dA = Q(dC | N) @ Q(B | N)^T``, ``dB = Q(A | M)^T @
  Q(dC | M)``; a proxy of None keeps that operand in high precision. The forward takes the
  forward-quantized weight with its own autograd history (its STE gives the gradient to the
  weight, learned scales included). A linear layer with ``x`` ``[..., I]`` and ``W`` ``[O, I]``:
  ``dX = Q(dY | O) Q(W | O)``, ``dW = Q(dY | tokens)^T Q(x | tokens)``; a convolution reduces
  ``dX`` over the output channels and ``dW`` over batch and positions (``dY`` and ``x`` grouped
  along the batch dim 0, as microxcaling's convolution does). It saves the high-precision ``x``
  and ``W`` (what a float layer saves), never quantized copies.
- **memory-lean straight-through** (:mod:`groupquant.nn.gemm.lean_gemm`): the backward of ``op(xq, Wq, b)`` through
  plain autograd (``dX = dY Wq``, ``dW = dY^T xq``), with ``Wq`` computed inside from the weight
  by the layer's own weight proxy, used for ``dX`` first and then freed before ``dW``, which a
  linear layer writes into ``Wq``'s buffer: peak memory ``W + dW`` as a float layer's, against
  ``W + Wq + dW`` through plain autograd, the same results bit for bit; or (``keep_quantized_weight``
  False) ``Wq`` made again in backward from the saved weight, nothing weight-sized kept between.

In both, a linear layer's weight gradient goes into the buffer of a weight-sized temporary the
backward no longer needs (no fresh allocation). The backward runs once (no ``retain_graph`` in the
lean configuration) and is not itself differentiable.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch
from torch.autograd.function import once_differentiable

from ...proxy import QuantProxy
from .gemm_op import GemmOp
from .gemm_rounding import GemmRounding, round_result

__all__ = ["BackwardOperands", "GemmBackward", "TOKEN_GROUPS", "gemm_forward", "matmul_forward", "quant_gemm",
           "quantized_backward_matmul"]

#: How a linear layer's grad-weight GEMM groups its operands (``dY`` and ``x``) along the tokens:
#: ``"tokens"`` all tokens of the flattened ``[tokens, features]`` view; ``"sequence"`` along dim -2
#: of the tensor as given, each leading index on its own (microxcaling's ``Linear``: a 3-d input's
#: blocks never span two sequences). The two agree on 2-d input.
TOKEN_GROUPS = ("tokens", "sequence")


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


#: The straight-through operands: every backward operand as the forward left it.
STRAIGHT_THROUGH = BackwardOperands()


@dataclass(frozen=True, eq=False)
class GemmBackward:
    """The configuration of one call of :func:`quant_gemm`.

    op: the GEMM (linear or a zero-padded convolution).
    operands: the backward operand quantizers (quantized backward), or None: every operand as
        the forward left it (:data:`STRAIGHT_THROUGH`).
    weight_quant: the layer's weight proxy for the memory-lean configuration (the forward
        quantizes the weight inside, the backward takes the forward-quantized input and weight as
        ``A`` and ``B``), or None for the quantized backward (forward-quantized weight given, the
        backward re-quantizes the saved high-precision ``x`` and ``W``).
    rounding: the element-wise roundings of the GEMM's output and gradients
        (:class:`~groupquant.nn.gemm.gemm_rounding.GemmRounding`), or None.
    token_groups: how a linear layer's grad-weight operands group along the tokens (:data:`TOKEN_GROUPS`).
    keep_quantized_weight: (lean) keep ``Wq`` from the forward for the backward, else make it again
        there from the saved float weight (the same bits; nothing weight-sized kept in between).
    """

    op: GemmOp
    operands: Optional[BackwardOperands] = None
    weight_quant: Optional[Any] = None
    rounding: Optional[GemmRounding] = None
    token_groups: str = "tokens"
    keep_quantized_weight: bool = True

    @property
    def lean(self) -> bool:
        return self.weight_quant is not None


def _q(proxy: Optional[QuantProxy], t: torch.Tensor) -> torch.Tensor:
    """``t`` quantized by ``proxy`` (its dims are the GEMM's), or ``t`` itself."""
    return t if proxy is None else proxy.quant_value(t)


def _q_tokens(proxy: Optional[QuantProxy], t: torch.Tensor, token_groups: str) -> torch.Tensor:
    """``t`` ``[..., features]`` as the 2-d ``[tokens, features]`` operand of the grad-weight GEMM,
    quantized by ``proxy`` along the tokens: all of them, or (``"sequence"``) along dim -2 of ``t``
    for each leading index (the view ``[S, rest]`` grouped along its dim 0 has exactly those blocks)."""
    if proxy is None or token_groups == "tokens" or t.dim() <= 2:
        return _q(proxy, t.reshape(-1, t.shape[-1]))
    by_sequence = t.movedim(-2, 0)
    shape = by_sequence.shape
    q = _q(proxy, by_sequence.reshape(shape[0], -1)).reshape(shape).movedim(0, -2)
    return q.reshape(-1, t.shape[-1])


def gemm_forward(op: GemmOp, xq: torch.Tensor, wq: torch.Tensor, bias: Optional[torch.Tensor],
                 rounding: Optional[GemmRounding]) -> torch.Tensor:
    """``op(xq, wq, bias)`` with the output rounding of ``rounding``: ``q(q(op(xq, wq)) + bias)``
    (``bias_add="rounded"``) or ``q(op(xq, wq, bias))`` (``"inside"``); unrounded when None."""
    if rounding is None or rounding.output is None:
        return op.forward(xq, wq, bias)
    if bias is None or rounding.bias_add == "inside":
        return round_result(op.forward(xq, wq, bias), rounding.output)
    out = round_result(op.forward(xq, wq, None), rounding.output)
    shape = [1] * out.dim()
    shape[1 if op.kind != "linear" else -1] = -1
    return round_result(out + bias.reshape(shape), rounding.output)


class _QuantGemm(torch.autograd.Function):
    """``op(xq, Wq, b)`` with the backward :class:`GemmBackward` configures (see module doc)."""

    @staticmethod
    def forward(ctx, xq: torch.Tensor, w_in: torch.Tensor, bias: Optional[torch.Tensor],  # type: ignore[override]
                x: torch.Tensor, w: torch.Tensor, plan: GemmBackward) -> torch.Tensor:
        if plan.lean:  # w_in is the float weight: Wq kept without grad history (or made again), freed in backward
            wq = plan.weight_quant.quant_value(w_in)
            ctx.wq = wq if plan.keep_quantized_weight else None
            ctx.save_for_backward(xq, w_in)
        else:  # w_in is the forward-quantized weight; x and W (high precision) saved
            wq = w_in
            ctx.save_for_backward(x, w)
        ctx.plan, ctx.has_bias = plan, bias is not None
        return gemm_forward(plan.op, xq, wq, bias, plan.rounding)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        a, w = ctx.saved_tensors
        plan = ctx.plan
        spare = None  # a weight-sized temporary the backward no longer needs after dA
        if plan.lean and plan.keep_quantized_weight:
            spare = ctx.wq
            if spare is None:
                raise RuntimeError("the memory-lean backward of a quant layer frees the quantized weight and cannot "
                                   "run twice (retain_graph=True); set layer.memory_lean_backward = False, or "
                                   "layer.recompute_quantized_weight = True, for that")
            ctx.wq = None
        elif plan.lean and ctx.needs_input_grad[0]:  # Wq made again: the forward's bits (a dynamic quantizer)
            spare = plan.weight_quant.quant_value(w)
        need = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2])
        rounding = plan.rounding
        if rounding is not None:
            grad = round_result(grad, rounding.grad_output)
        if plan.op.kind == "linear":
            grads = _linear_backward(grad, a, w, spare, plan, need)
        else:
            grads = _conv_backward(grad, a, w, spare, plan, need)
        if rounding is not None:
            grads = (round_result(grads[0], rounding.grad_input), round_result(grads[1], rounding.grad_weight),
                     round_result(grads[2], rounding.grad_bias))
        return grads + (None, None, None)


def _linear_backward(grad: torch.Tensor, a: torch.Tensor, w: torch.Tensor, wq: Optional[torch.Tensor],
                     plan: GemmBackward, need: Tuple[bool, bool, bool]) -> Tuple[Optional[torch.Tensor], ...]:
    """dX = G(dY) B, dW = G'(dY)^T A (A: ``a`` 2-D over tokens, grouped as ``plan.token_groups``
    says; B: ``wq`` when given, else ``w`` through its quantizer); db = the sum of dY over tokens."""
    ops = plan.operands or STRAIGHT_THROUGH
    g2 = grad.reshape(-1, grad.shape[-1])
    grad_x = grad_w = None
    b = wq
    if need[0]:
        b = _q(ops.b_for_grad_a, w) if b is None else b
        grad_x = _q(ops.grad_output, g2).mm(b).reshape(a.shape)
    if need[1]:
        spare = b if b is not None and b is not w else None
        reuse = (spare is not None and spare.dtype == grad.dtype and spare.is_contiguous()
                 and not torch.compiler.is_compiling())
        groups = plan.token_groups
        grad_w = torch.mm(_q_tokens(ops.grad_output_for_grad_b, grad, groups).t(),
                          _q_tokens(ops.a_for_grad_b, a, groups), out=spare if reuse else None)  # over the no longer needed B
    del b, wq
    return grad_x, grad_w, g2.sum(0) if need[2] else None


def _conv_backward(grad: torch.Tensor, a: torch.Tensor, w: torch.Tensor, wq: Optional[torch.Tensor],
                   plan: GemmBackward, need: Tuple[bool, bool, bool]) -> Tuple[Optional[torch.Tensor], ...]:
    """dX from G(dY) and B (``wq`` when given, else ``w`` through its quantizer); dW from G'(dY)
    and A; db = the sum of dY over all dims but the channels."""
    ops, op = plan.operands or STRAIGHT_THROUGH, plan.op
    grad_x = grad_w = grad_b = None
    if need[0]:
        b = _q(ops.b_for_grad_a, w) if wq is None else wq
        grad_x = op.conv_backward(_q(ops.grad_output, grad), a, b, (True, False, False), None)[0]
        del b
    del wq
    if need[1]:
        grad_w = op.conv_backward(_q(ops.grad_output_for_grad_b, grad), _q(ops.a_for_grad_b, a), w,
                                  (False, True, False), None)[1]
    if need[2]:
        grad_b = op.bias_grad(grad, a, w, as_autograd=plan.lean)  # the lean one equals plain autograd
    return grad_x, grad_w, grad_b


def quant_gemm(xq: torch.Tensor, w_in: torch.Tensor, bias: Optional[torch.Tensor], x: torch.Tensor,
               w: torch.Tensor, plan: GemmBackward) -> torch.Tensor:
    """``plan.op(xq, Wq, bias)`` with the backward ``plan`` configures. ``xq``: the forward-quantized
    input (with its own gradient); ``w_in``: the float weight (lean) or the forward-quantized one;
    ``x`` / ``w``: the high-precision input and weight (the quantized backward requantizes them)."""
    return _QuantGemm.apply(xq, w_in, bias, x.detach(), w.detach(), plan)


def matmul_forward(aq: torch.Tensor, bq: torch.Tensor, bias: Optional[torch.Tensor],
                   rounding: Optional[GemmRounding]) -> torch.Tensor:
    """``aq @ bq (+ bias)`` with the output rounding of ``rounding``: ``q(q(aq @ bq) + bias)``."""
    out = aq.matmul(bq)  # (tensor methods: microxcaling's injected torch entries do not replace them)
    if rounding is None or rounding.output is None:
        return out if bias is None else out + bias
    out = round_result(out, rounding.output)
    return out if bias is None else round_result(out + bias, rounding.output)


def _bias_grad(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``grad`` summed to a bias of ``shape``: over every row for a bias of the last dim's size."""
    if len(shape) <= 1 and shape.numel() == grad.shape[-1]:
        return grad.reshape(-1, grad.shape[-1]).sum(0).reshape(shape)
    return grad.sum_to_size(shape)


class _QuantizedBackwardMatMul(torch.autograd.Function):
    """``aq @ bq (+ bias)`` with dA = Q(dC | N) Q(B | N)^T and dB = Q(A | M)^T Q(dC | M); with a
    :class:`GemmRounding`, the output, ``dC`` and the results rounded (``grad_input``: dA,
    ``grad_weight``: dB, before the sum over broadcast batch dims; ``grad_bias``: the bias's)."""

    @staticmethod
    def forward(ctx, aq: torch.Tensor, bq: torch.Tensor, bias: Optional[torch.Tensor],  # type: ignore[override]
                a: torch.Tensor, b: torch.Tensor, ops: BackwardOperands, rounding: Optional[GemmRounding]) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.ops, ctx.rounding, ctx.bias_shape = ops, rounding, None if bias is None else bias.shape
        return matmul_forward(aq, bq, bias, rounding)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        a, b = ctx.saved_tensors
        ops, rounding = ctx.ops, ctx.rounding
        grad = grad if rounding is None else round_result(grad, rounding.grad_output)
        grad_a = grad_b = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_a = _q(ops.grad_output, grad).matmul(_q(ops.b_for_grad_a, b).transpose(-1, -2))
            grad_a = grad_a if rounding is None else round_result(grad_a, rounding.grad_input)
            grad_a = grad_a.sum_to_size(a.shape)
        if ctx.needs_input_grad[1]:
            grad_b = _q(ops.a_for_grad_b, a).transpose(-1, -2).matmul(_q(ops.grad_output_for_grad_b, grad))
            grad_b = grad_b if rounding is None else round_result(grad_b, rounding.grad_weight)
            grad_b = grad_b.sum_to_size(b.shape)
        if ctx.bias_shape is not None and ctx.needs_input_grad[2]:
            grad_bias = _bias_grad(grad, ctx.bias_shape)
            grad_bias = grad_bias if rounding is None else round_result(grad_bias, rounding.grad_bias)
        return grad_a, grad_b, grad_bias, None, None, None, None


def quantized_backward_matmul(aq: torch.Tensor, bq: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                              ops: BackwardOperands, rounding: Optional[GemmRounding] = None,
                              bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``torch.matmul(aq, bq) (+ bias)`` (both at least 2-D) whose backward quantizes from ``a`` and
    ``b`` (output and gradients rounded by ``rounding`` when given)."""
    return _QuantizedBackwardMatMul.apply(aq, bq, bias, a.detach(), b.detach(), ops, rounding)
