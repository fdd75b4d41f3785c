"""nn.Module forms of the element-wise ops, each in a chosen precision (default bfloat16)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from . import activations, normalization, softmax as softmax_op
from .rounded_math import PrecisionLike

__all__ = ["Softmax", "GELU", "SiLU", "Sigmoid", "Tanh", "ReLU", "LayerNorm", "RMSNorm", "GroupNorm"]


class _Elementwise(nn.Module):
    """Holds the precision; ``forward`` returns the input's dtype."""

    def __init__(self, precision: PrecisionLike = "bfloat16") -> None:
        super().__init__()
        self.precision = precision

    def extra_repr(self) -> str:
        return f"precision={self.precision!r}"


class Softmax(_Elementwise):
    """``softmax(x, dim)`` with every basic operation rounded (``use_exp2``: exponentials as 2**(x log2 e))."""

    def __init__(self, dim: int = -1, precision: PrecisionLike = "bfloat16", use_exp2: bool = False) -> None:
        super().__init__(precision)
        self.dim, self.use_exp2 = dim, use_exp2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_op.softmax(x, self.dim, self.precision, self.use_exp2).to(x.dtype)


class GELU(_Elementwise):
    """GELU (``approximate='none'``: erf form; ``'tanh'``: tanh form), rounded."""

    def __init__(self, approximate: str = "none", precision: PrecisionLike = "bfloat16") -> None:
        super().__init__(precision)
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return activations.gelu(x, self.approximate, self.precision).to(x.dtype)


def _unary_module(name: str, fn: Any, doc: str) -> type:
    def forward(self: _Elementwise, x: torch.Tensor) -> torch.Tensor:
        return fn(x, precision=self.precision).to(x.dtype)
    return type(name, (_Elementwise,), {"forward": forward, "__doc__": doc})


SiLU = _unary_module("SiLU", activations.silu, "SiLU ``x * sigmoid(x)``, rounded.")
Sigmoid = _unary_module("Sigmoid", activations.sigmoid, "Sigmoid, rounded.")
Tanh = _unary_module("Tanh", activations.tanh, "Tanh, rounded.")
ReLU = _unary_module("ReLU", activations.relu, "ReLU (NaN stays NaN).")


class LayerNorm(nn.LayerNorm):
    """Drop-in ``nn.LayerNorm`` computed by :func:`groupquant.elementwise.layer_norm` in ``precision``."""

    def __init__(self, *args: Any, precision: PrecisionLike = "bfloat16", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.precision = precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return normalization.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps,
                                        precision=self.precision).to(x.dtype)


class RMSNorm(nn.Module):
    """RMS norm over the trailing ``normalized_shape`` dims (learnable scale), in ``precision``."""

    def __init__(self, normalized_shape: Any, eps: float = 1e-6, elementwise_affine: bool = True,
                 precision: PrecisionLike = "bfloat16") -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.precision = eps, precision
        self.weight = nn.Parameter(torch.ones(self.normalized_shape)) if elementwise_affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return normalization.rms_norm(x, self.normalized_shape, self.weight, self.eps,
                                      precision=self.precision).to(x.dtype)


class GroupNorm(nn.GroupNorm):
    """Drop-in ``nn.GroupNorm`` computed in ``precision``."""

    def __init__(self, *args: Any, precision: PrecisionLike = "bfloat16", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.precision = precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return normalization.group_norm(x, self.num_groups, self.weight, self.bias, self.eps,
                                        precision=self.precision).to(x.dtype)
