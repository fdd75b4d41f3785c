"""QuantMatMul: ``a @ b`` of two activations (attention's Q K^T and P V, bmm, broadcasting matmul).

``a`` ``[..., M, K]`` is grouped along its last dim and ``b`` ``[..., K, N]`` along its
second-to-last (the reduction dim K). With backward quantization (``grad_output_quant`` given,
or ``quantize_backprop=True``): ``dA = Q(dC | N) Q(B | N)^T`` and ``dB = Q(A | M)^T Q(dC | M)``,
each operand quantized from its high-precision tensor; the per-GEMM slots ``b_quant_for_grad_a``,
``grad_output_quant_for_grad_b`` and ``a_quant_for_grad_b`` default to ``b_quant`` /
``grad_output_quant`` / ``a_quant`` (see :mod:`groupquant.nn.gemm.grad_slots`). Both operands need at
least 2 dims; batch dims broadcast as in ``torch.matmul``. ``gemm_rounding`` (a
:class:`~groupquant.nn.GemmRounding`) rounds ``a`` (its ``input``), ``b`` (its ``weight``), the
output and the gradients (``grad_input``: dA, ``grad_weight``: dB, ``grad_bias``); a bias given to
``forward`` is added after the rounded product (``q(q(a @ b) + bias)``).
"""
from __future__ import annotations

import functools
from typing import Any, Optional

import torch
from torch import nn

from ...proxy import ActQuantProxy
from ...quant_tensor import QuantTensor, plain
from ..gemm.backward_gemm import matmul_forward, quantized_backward_matmul
from ..gemm.gemm_rounding import check_gemm_rounding, round_operand
from .inside import in_quant_layer
from ..gemm.grad_slots import (MATMUL_GRAD_SLOTS, backprop_enabled, backward_operands, build_backward_operands,
                         grad_slot_prefixes)
from .keywords import route_keywords

__all__ = ["QuantMatMul", "quant_matmul"]


class QuantMatMul(nn.Module):
    """``torch.matmul(a_quant(a), b_quant(b))`` with optional backward quantization.

    Keywords by prefix reach one quantizer: ``a_group_size=16``, ``grad_output_scale_rounding="even"``,
    ``b_for_grad_a_group_size=...`` (prefixes ``a_``, ``b_``, ``grad_output_``, ``b_for_grad_a_``,
    ``grad_output_for_grad_b_``, ``a_for_grad_b_``).
    """

    def __init__(self, *, a_quant: Optional[type] = None, b_quant: Optional[type] = None,
                 quantize_backprop: Optional[bool] = None, gemm_rounding: Any = None, **quant_kwargs: Any) -> None:
        super().__init__()
        context = type(self).__name__
        slots = {s.name: quant_kwargs.pop(s.name) for s in MATMUL_GRAD_SLOTS if s.name in quant_kwargs}
        quants = {"a_": a_quant, "b_": b_quant}
        quants.update(grad_slot_prefixes(slots, MATMUL_GRAD_SLOTS))
        routed = route_keywords(quant_kwargs, quants, context)
        self.a_quant = ActQuantProxy(a_quant, "a_", -1, routed["a_"], context)
        self.b_quant = ActQuantProxy(b_quant, "b_", -2, routed["b_"], context)
        self.quantize_backprop = backprop_enabled(slots, quantize_backprop, context)
        if self.quantize_backprop:
            forward = {"a_quant": self.a_quant.quantizer, "b_quant": self.b_quant.quantizer}
            proxies = build_backward_operands(slots, forward, routed, context, MATMUL_GRAD_SLOTS)
            for name, proxy in proxies.items():
                setattr(self, name, proxy)
        self.gemm_rounding = check_gemm_rounding(gemm_rounding, self.quantize_backprop, context)

    def forward(self, a: torch.Tensor | QuantTensor, b: torch.Tensor | QuantTensor,
                bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``a_quant(a) @ b_quant(b)``, plus ``bias`` (float, broadcast as in ``torch.addmm``) when given."""
        with in_quant_layer():
            return self._matmul(plain(a), plain(b), bias)

    def _matmul(self, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        if a.dim() < 2 or b.dim() < 2:
            raise ValueError(f"QuantMatMul needs operands with at least 2 dims (groups run along K), got "
                             f"{tuple(a.shape)} @ {tuple(b.shape)}; unsqueeze vectors first")
        rounding = self.gemm_rounding
        if rounding is not None:  # operands rounded first (straight through), see .gemm_rounding
            given = (a, b)
            a, b = round_operand(a, rounding.input), round_operand(b, rounding.weight)
            bias = round_operand(bias, rounding.bias)
        a_hp, b_hp = (a, b) if rounding is None or rounding.backward_operands == "rounded" else given
        aq, bq = self.a_quant.quant_value(a), self.b_quant.quant_value(b)
        needs_grad = aq.requires_grad or bq.requires_grad or (bias is not None and bias.requires_grad)
        if self.quantize_backprop and torch.is_grad_enabled() and needs_grad:
            ops = backward_operands({s.name: getattr(self, s.name) for s in MATMUL_GRAD_SLOTS}, MATMUL_GRAD_SLOTS)
            return quantized_backward_matmul(aq, bq, a_hp, b_hp, ops, rounding, bias)
        return matmul_forward(aq, bq, bias, rounding)


@functools.lru_cache(maxsize=256)
def _cached(key: tuple) -> QuantMatMul:
    return QuantMatMul(**dict(key))


def quant_matmul(a: torch.Tensor, b: torch.Tensor, **slots: Any) -> torch.Tensor:
    """Functional :class:`QuantMatMul`: ``quant_matmul(q, k.transpose(-1, -2), a_quant=MXFloat8e4m3Act,
    b_quant=MXFloat8e4m3Act, grad_output_quant=MXFloat8e5m2Act)``. The module for each distinct set
    of quantizers and keywords (hashable values) is built once; it holds no state (dynamic scales)."""
    return _cached(tuple(sorted(slots.items())))(a, b)
