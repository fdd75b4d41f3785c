"""``softmax`` / ``Softmax`` taking ``mx_specs``, each step rounded in microxcaling's order.

Forward: ``x = q(x)``; ``s = q(x - max(x))``; ``e = q(e**s)`` (``q(2**s)`` with ``softmax_exp2``;
``vec_use_exp2`` applies too); ``y = q(e / q(sum e))``. Backward: ``g = q(g)``;
``dx = q(y * q(g - q(sum q(g * y))))``, times ``q(. * LN_2_BF16)`` with ``softmax_exp2``.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional, Tuple

import torch

from . import _torch
from .specs import MxSpecs, apply_mx_specs, get_backwards_mx_specs
from .vector_ops import LN_2_BF16, Vec

__all__ = ["softmax", "Softmax"]


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int, specs: MxSpecs) -> torch.Tensor:  # type: ignore[override]
        v = Vec(specs, specs["round"])
        dim = dim % x.ndim
        x = v.q(x)
        shifted = v.sub(x, x.amax(dim, keepdim=True))
        e = v.exp2(shifted) if specs.get("softmax_exp2") else v.exp(shifted)
        y = v.div(e, v.sum(e, dim, keepdim=True))
        ctx.save_for_backward(y)
        ctx.dim, ctx.exp2, ctx.specs = dim, bool(specs.get("softmax_exp2")), get_backwards_mx_specs(specs)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        v = Vec(ctx.specs, ctx.specs["round"])
        g = v.q(g)
        dx = v.mul(y, v.sub(g, v.sum(v.mul(g, y), ctx.dim, keepdim=True)))
        if ctx.exp2:
            dx = v.mul(dx, LN_2_BF16)
        return dx, None, None


def implicit_dim(ndim: int) -> int:
    """torch's deprecated choice of softmax dim for ``dim=None`` (0 for 0-, 1- and 3-d input, else 1),
    with torch's warning."""
    warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the call to include dim=X "
                  "as an argument.", UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: torch.Tensor, dim: Optional[int] = -1, mx_specs: Optional[Mapping[str, Any]] = None,
            name: Optional[str] = None) -> torch.Tensor:
    """``F.softmax`` with ``mx_specs`` (plain when None); ``dim=None`` picks torch's implicit dim."""
    if mx_specs is None:
        return _torch.softmax(input, dim=dim)
    if dim is None:
        dim = implicit_dim(input.ndim)
    return _Softmax.apply(input, dim, apply_mx_specs(mx_specs))


class Softmax(torch.nn.Softmax):
    """``torch.nn.Softmax`` taking ``mx_specs``."""

    def __init__(self, dim: Optional[int] = None, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(dim)
        self.name = name
        self.apply_mx_specs(mx_specs)

    def apply_mx_specs(self, mx_specs: Optional[Mapping[str, Any]]) -> None:
        """Replace the settings (None: plain softmax)."""
        self.mx_none = mx_specs is None
        self.mx_specs = apply_mx_specs(mx_specs)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return softmax(input, self.dim, mx_specs=None if self.mx_none else self.mx_specs)
