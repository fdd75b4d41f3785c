"""``Linear`` / ``linear`` taking ``mx_specs``, computed in microxcaling's order.

Forward: ``x``, ``W``, ``b`` rounded to the element-wise precision (``round_output`` for x,
``round_weight`` for W and b); MX blocks of x and W along the features (``a_elem_format``,
``w_elem_format``, ``round_mx_output``); float GEMM; output rounded (``round_output``); bias added
and rounded again. Backward (with the backward specs, see ``quantize_backprop``): dY rounded
(``round_grad_input``); grad-weight GEMM ``dY^T x`` with dY in ``a_elem_format_bp_ex`` and x in
``a_elem_format_bp``, both blocked along dim -2 (the tokens of the un-flattened tensor, as
microxcaling groups them); grad-input GEMM ``dY W`` with dY in ``a_elem_format_bp_os`` (along the
outputs) and W in ``w_elem_format_bp`` (along dim 0); each result rounded (``round_grad_weight``,
``round_grad_input``), and the bias gradient is the rounded sum of the rounded dY.

This is :func:`.recipe.recipe_from_mx_specs` run by groupquant's quant-layer route
(:class:`groupquant.nn.functional_quantizers.FunctionalLinear`, the layer that borrows ``W`` and
``b``): the slots, ``gemm_rounding`` and ``grad_weight_groups="sequence"`` of the recipe are the
order above. The one setting no quantizer carries (:func:`.recipe.native_problem`:
``shared_exp_from_float_log2``) takes :class:`LinearFunction`, the same order with the
block-by-block quantizer of :mod:`.quantize`.
"""
from __future__ import annotations

import functools
from typing import Any, Mapping, Optional, Tuple

import torch

from . import _torch
from ._torch import native_torch
from ...nn.functional_quantizers import FunctionalLinear
from .mapping import check_settings
from .recipe import _recipe, native_problem
from .module_specs import MxSpecsMixin
from .quantize import quantize_elemwise_op, quantize_mx_op
from .specs import MxSpecs, apply_mx_specs, get_backwards_mx_specs

__all__ = ["Linear", "linear", "LinearFunction"]


_FORMATS = ("w_elem_format", "a_elem_format", "w_elem_format_bp", "a_elem_format_bp", "a_elem_format_bp_ex",
            "a_elem_format_bp_os")
_MX_ROUNDS = ("round_mx_output", "round_mx_weight_grad_input", "round_mx_grad_output_grad_input",
              "round_mx_input_grad_weight", "round_mx_grad_output_grad_weight")
_ELEMENT_ROUNDS = ("round_output", "round_weight", "round_grad_weight", "round_grad_input")


def _mx(t: torch.Tensor, specs: Mapping[str, Any], fmt_key: str, axis: int, round_key: str) -> torch.Tensor:
    """MX blocks of ``t`` along ``axis`` in ``specs[fmt_key]``, rounded by ``specs[round_key]``."""
    return quantize_mx_op(t, specs, elem_format=specs[fmt_key], axes=[axis], round=specs[round_key])


class LinearFunction(torch.autograd.Function):
    """``y = x W^T + b`` with microxcaling's roundings forward and backward (see the module notes)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],  # type: ignore[override]
                specs: MxSpecs) -> torch.Tensor:
        bf_x = quantize_elemwise_op(x, specs, specs["round_output"])
        bf_w = quantize_elemwise_op(weight, specs, specs["round_weight"])
        bf_b = None if bias is None else quantize_elemwise_op(bias, specs, specs["round_weight"])
        ctx.save_for_backward(*((bf_x, bf_w) if specs["quantize_backprop"] else (x, weight)))
        ctx.has_bias = bias is not None
        qx = _mx(bf_x, specs, "a_elem_format", -1, "round_mx_output")
        qw = _mx(bf_w, specs, "w_elem_format", -1, "round_mx_output")
        if qw.dtype != qx.dtype:
            qw = qw.to(qx.dtype)
        out = quantize_elemwise_op(_torch.linear(qx, qw), specs, specs["round_output"])
        if bf_b is not None:
            out = quantize_elemwise_op(out + bf_b, specs, specs["round_output"])
        ctx.specs = get_backwards_mx_specs(specs)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        x, weight = ctx.saved_tensors
        s = ctx.specs
        out_dim, in_dim = weight.shape
        grad = quantize_elemwise_op(grad, s, s["round_grad_input"])
        qx = _mx(x, s, "a_elem_format_bp", -2, "round_mx_input_grad_weight").reshape(-1, in_dim)
        qg = _mx(grad, s, "a_elem_format_bp_ex", -2, "round_mx_grad_output_grad_weight").reshape(-1, out_dim)
        grad_w = quantize_elemwise_op(_torch.matmul(qg.t(), qx), s, s["round_grad_weight"])
        qw = _mx(weight, s, "w_elem_format_bp", 0, "round_mx_weight_grad_input")
        qg_in = _mx(grad, s, "a_elem_format_bp_os", -1, "round_mx_grad_output_grad_input")
        grad_x = quantize_elemwise_op(_torch.matmul(qg_in, qw), s, s["round_grad_input"])
        grad_b = None
        if ctx.has_bias:
            grad_b = quantize_elemwise_op(grad.reshape(-1, out_dim).sum(0), s, s["round_grad_weight"])
        return grad_x, grad_w, grad_b, None


def linear(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
           mx_specs: Optional[Mapping[str, Any]] = None, prequantized_weights: bool = False,
           name: Optional[str] = None) -> torch.Tensor:
    """``F.linear`` with ``mx_specs`` (plain ``F.linear`` when None). ``prequantized_weights`` must be
    False (microxcaling's bfloat16-weight inference shortcut is not provided); ``name`` is kept for
    compatibility."""
    if prequantized_weights:
        raise NotImplementedError("linear(prequantized_weights=True) is not provided by groupquant's "
                                  "microxcaling compat; quantize the weights with groupquant.pack_model instead")
    if mx_specs is None:
        return _torch.linear(input, weight, bias)
    if input.ndim == 1:  # torch's linear takes one vector and returns one
        return linear(input.unsqueeze(0), weight, bias, mx_specs=mx_specs).squeeze(0)
    specs = apply_mx_specs(mx_specs)
    check_settings(specs, _FORMATS, _MX_ROUNDS, _ELEMENT_ROUNDS)
    if native_problem(specs) is not None:
        return LinearFunction.apply(input, weight, bias, specs)
    layer = _layer(_key(specs), tuple(weight.shape), bias is not None, weight.device)
    with native_torch():
        return layer(input, weight, bias)


def _key(specs: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
    """The settings as a hashable key (one layer per distinct ``mx_specs``)."""
    return tuple(sorted(specs.items(), key=lambda item: item[0]))


@functools.lru_cache(maxsize=128)
def _layer(key: Tuple[Tuple[str, Any], ...], shape: Tuple[int, int], bias: bool,
           device: torch.device) -> FunctionalLinear:
    """The quant layer of one ``mx_specs`` for a weight of ``shape`` (stateless: dynamic MX scales)."""
    return FunctionalLinear(shape[0], shape[1], bias, _recipe(MxSpecs(dict(key)), "mx_specs"), device=device)


class Linear(MxSpecsMixin, torch.nn.Linear):
    """``torch.nn.Linear`` whose forward is :func:`linear` with ``mx_specs`` (None: plain linear)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None, **factory: Any) -> None:
        super().__init__(in_features, out_features, bias, **factory)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.mx_none:
            return _torch.linear(input, self.weight, self.bias)
        return linear(input, self.weight, self.bias, mx_specs=self.mx_specs)
