"""``matmul`` / ``bmm`` of two tensors taking ``mx_specs``, in microxcaling's order.

Forward: both operands rounded to the element-wise precision (``round_output``; a bias by
``round_weight``); MX blocks along the reduction dim (dim -1 of ``a``, dim -2 of ``b``) in
``a_elem_format`` (``mode_config`` ``'aw'`` / ``'wa'`` puts ``w_elem_format`` on that side),
``round_mx_output``; float matmul; output rounded (and again after the bias).

Backward (backward specs): dY rounded (``round_grad_input``); ``dA = dY B^T`` and ``dB = A^T dY``
with dY in ``a_elem_format_bp_os`` (along dim -1 for dA, dim -2 for dB), the saved operands in
``a_elem_format_bp`` (``w_elem_format_bp`` for a ``'w'`` side), blocked along dim -2 of ``a`` and
-1 of ``b``, rounded by ``round_mx_input_grad_input`` / ``round_mx_grad_output_grad_input``; each
gradient rounded (``round_grad_input``). microxcaling uses ``a_elem_format_bp_os`` for dY in both
backward GEMMs of a matmul (``a_elem_format_bp_ex`` only in ``Linear``); so does this module.

This is :class:`groupquant.nn.QuantMatMul` with :func:`.recipe.matmul_settings` (a bias, as
``addmm`` gives one, added after the rounded product); :class:`MatMulFunction` (the block-by-block
quantizer of :mod:`.quantize`) is taken for the settings of :func:`.recipe.native_problem`.
"""
from __future__ import annotations

import functools
from typing import Any, Mapping, Optional, Tuple

import torch

from . import _torch
from ._torch import native_torch
from ...nn import QuantMatMul
from .recipe import matmul_settings, native_problem
from .mapping import check_settings
from .quantize import quantize_elemwise_op, quantize_mx_op
from .specs import MxSpecs, apply_mx_specs, get_backwards_mx_specs

__all__ = ["matmul", "bmm", "MatMulFunction"]

_MODES = ("aa", "aw", "wa")


def _side_format(specs: Mapping[str, Any], side: str, backward: bool) -> Any:
    """The element format of one operand side (``'a'`` or ``'w'``), forward or backward."""
    key = ("a_elem_format" if side == "a" else "w_elem_format") + ("_bp" if backward else "")
    return specs[key]


class MatMulFunction(torch.autograd.Function):
    """``a @ b (+ bias)`` with microxcaling's roundings forward and backward (see the module notes)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor],  # type: ignore[override]
                specs: MxSpecs, mode: str) -> torch.Tensor:
        bf_a = quantize_elemwise_op(a, specs, specs["round_output"])
        bf_b = quantize_elemwise_op(b, specs, specs["round_output"])
        ctx.save_for_backward(*((bf_a, bf_b) if specs["quantize_backprop"] else (a, b)))
        ctx.bias_shape = None if bias is None else bias.shape
        ctx.mode = mode
        r = specs["round_mx_output"]
        qa = quantize_mx_op(bf_a, specs, _side_format(specs, mode[0], False), axes=[-1], round=r)
        qb = quantize_mx_op(bf_b, specs, _side_format(specs, mode[1], False), axes=[-2], round=r)
        out = quantize_elemwise_op(_torch.matmul(qa, qb), specs, specs["round_output"])
        if bias is not None:
            bf_bias = quantize_elemwise_op(bias, specs, specs["round_weight"])
            out = quantize_elemwise_op(out + bf_bias, specs, specs["round_output"])
        ctx.specs = get_backwards_mx_specs(specs)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        a, b = ctx.saved_tensors
        s = ctx.specs
        grad = quantize_elemwise_op(grad, s, s["round_grad_input"])
        r_in, r_g = s["round_mx_input_grad_input"], s["round_mx_grad_output_grad_input"]
        qa = quantize_mx_op(a, s, _side_format(s, ctx.mode[0], True), axes=[-2], round=r_in)
        qb = quantize_mx_op(b, s, _side_format(s, ctx.mode[1], True), axes=[-1], round=r_in)
        qg1 = quantize_mx_op(grad, s, s["a_elem_format_bp_os"], axes=[-1], round=r_g)
        qg2 = quantize_mx_op(grad, s, s["a_elem_format_bp_os"], axes=[-2], round=r_g)
        grad_a = quantize_elemwise_op(_torch.matmul(qg1, qb.transpose(-1, -2)), s, s["round_grad_input"])
        grad_b = quantize_elemwise_op(_torch.matmul(qa.transpose(-1, -2), qg2), s, s["round_grad_input"])
        grad_a = _sum_to(grad_a, a.shape)
        grad_b = _sum_to(grad_b, b.shape)
        grad_bias = None
        if ctx.bias_shape is not None:
            total = grad.reshape(-1, grad.shape[-1]).sum(0).reshape(ctx.bias_shape)
            grad_bias = quantize_elemwise_op(total, s, s["round_grad_weight"])
        return grad_a, grad_b, grad_bias, None, None


def _sum_to(g: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``g`` summed over broadcast batch dims down to ``shape`` (a 2-d ``b`` against a batched ``a``)."""
    if g.shape == shape:
        return g
    return g.sum_to_size(shape)


def matmul(in1: torch.Tensor, in2: torch.Tensor, bias: Optional[torch.Tensor] = None,
           mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
           mode_config: str = "aa") -> torch.Tensor:
    """``torch.matmul(in1, in2)`` (``+ bias``) with ``mx_specs``; plain torch when None.

    ``mode_config``: ``'aa'`` (both activations), ``'aw'`` / ``'wa'`` (that side a weight)."""
    if mode_config not in _MODES:
        raise ValueError(f"matmul mode_config must be one of {_MODES}, got {mode_config!r}")
    if mx_specs is None:
        out = _torch.matmul(in1, in2)
        return out if bias is None else out + bias
    if in1.ndim == 1:  # torch.matmul's vector rules: a row vector on the left ...
        return matmul(in1.unsqueeze(0), in2, bias, mx_specs, name, mode_config).squeeze(-2)
    if in2.ndim == 1:  # ... a column vector on the right, the added dim removed from the result
        return matmul(in1, in2.unsqueeze(-1), bias, mx_specs, name, mode_config).squeeze(-1)
    specs = apply_mx_specs(mx_specs)
    formats = [side + "_elem_format" + suffix for side in sorted(set(mode_config)) for suffix in ("", "_bp")]
    check_settings(specs, formats + ["a_elem_format_bp_os"],
                   ("round_mx_output", "round_mx_input_grad_input", "round_mx_grad_output_grad_input"),
                   ("round_output", "round_weight", "round_grad_input", "round_grad_weight"))
    if native_problem(specs) is not None:
        return MatMulFunction.apply(in1, in2, bias, specs, mode_config)
    layer = _layer(tuple(sorted(specs.items(), key=lambda item: item[0])), mode_config)
    with native_torch():
        return layer(in1, in2, bias)


@functools.lru_cache(maxsize=128)
def _layer(key: Tuple[Tuple[str, Any], ...], mode: str) -> QuantMatMul:
    """The QuantMatMul of one ``mx_specs`` and ``mode_config`` (stateless: dynamic MX scales)."""
    return QuantMatMul(**matmul_settings(MxSpecs(dict(key)), mode))


def bmm(in1: torch.Tensor, in2: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None,
        name: Optional[str] = None) -> torch.Tensor:
    """``torch.bmm`` with ``mx_specs`` (both sides activations; plain torch when None)."""
    if in1.ndim != 3 or in2.ndim != 3:
        raise ValueError(f"bmm takes two 3-d tensors, got shapes {tuple(in1.shape)} and {tuple(in2.shape)}")
    return matmul(in1, in2, mx_specs=mx_specs, name=name)
