"""RotatedNorm: a norm whose input and output live in a rotated residual stream.

Used by ``rotate_model(fused_residual=True)`` for the final norm of a model whose output head is
tied to its embeddings: the shared weight is rotated once (``E Q``, right for the embeddings), so
the head needs ``norm(x) Q`` and the norm's elementwise weight cannot be folded into it.
``RotatedNorm`` computes ``norm(x' Q^T) Q`` with ``x' = x Q``: the original norm, weight and all,
between two fast transforms.
"""
from __future__ import annotations

import torch
from torch import nn

from .hadamard import ResidualRotation

__all__ = ["RotatedNorm"]


class RotatedNorm(nn.Module):
    """``rotate(norm(unrotate(x)))``; ``norm`` keeps its parameters (``.norm.weight``)."""

    def __init__(self, norm: nn.Module, signs: torch.Tensor, block_size: int) -> None:
        super().__init__()
        self.norm = norm
        self.unrotate = ResidualRotation(signs, block_size, inverse=True)
        self.rotate = ResidualRotation(signs, block_size)

    @property
    def weight(self) -> torch.Tensor:
        """The wrapped norm's weight (code that reads ``norm.weight`` keeps working)."""
        return self.norm.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rotate(self.norm(self.unrotate(x)))
