"""The input gradient of a packed linear layer: ``dX = dY @ W`` with ``W`` decoded from packed storage.

A packed layer holds no trainable weight (its codes are integers), so its backward gives the
gradient of the input only (float32 accumulation, cast to the input's dtype); the weight gets none
(``groupquant.unpack_model`` gives trainable layers back). This lets gradients flow through a frozen
packed base to what lies before it (adapters, prompts, inputs).
"""
from __future__ import annotations

from typing import Optional

import torch

from ..ops.packed_gemm import PackedWeight, packed_decode, packed_linear

__all__ = ["packed_linear_with_input_grad"]


class _PackedLinearInputGrad(torch.autograd.Function):
    """``packed_linear(x, w, b)`` whose backward is ``dY @ decode(w)`` for ``x`` (nothing else)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: PackedWeight,  # type: ignore[override]
                bias: Optional[torch.Tensor]) -> torch.Tensor:
        ctx.weight = weight
        ctx.input_dtype = x.dtype
        return packed_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        w = packed_decode(ctx.weight)  # float32 [N, K]: element * block scale (* tensor scale)
        return (grad.float() @ w).to(ctx.input_dtype), None, None


def packed_linear_with_input_grad(x: torch.Tensor, weight: PackedWeight,
                                  bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``x @ W^T + bias`` from packed storage; when ``x`` needs a gradient (grad mode on), its
    backward computes ``dY @ W`` (see the module docstring), else the plain packed GEMM runs."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _PackedLinearInputGrad.apply(x, weight, bias)
    return packed_linear(x, weight, bias)
