"""Hadamard rotations for calibration: the offline side of a block rotation.

The transform itself (fast Walsh-Hadamard along the last dim in blocks, the dense Sylvester and
block-diagonal matrices) is :mod:`groupquant.ops.hadamard`, below the layers, because a quant
layer's online rotation (:class:`groupquant.nn.layers.input_rotation.InputRotation`) runs it. Here:

- :func:`rotate_weight_input`: ``W H`` for ``y = x W^T`` whose input becomes ``x H``;
- :func:`rotate_weight_output`: ``H^T W`` (and ``b H``) for a linear whose output becomes ``y H``;
- :class:`ResidualRotation`: the seeded residual-stream rotation ``Q = diag(s) blockdiag(H_b)``
  (random signs ``s``, QuaRot's randomised Hadamard restricted to blocks) and its inverse.

Rotations of weights are computed in float64 and rounded once to the weight's dtype.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..ops.hadamard import block_hadamard_matrix, check_block_size, fwht, hadamard_matrix

__all__ = ["ResidualRotation", "block_hadamard_matrix", "fwht", "hadamard_matrix", "rotate_weight_input",
           "rotate_weight_output"]


def _rotation_matrix(features: int, block_size: int, signs: Optional[torch.Tensor]) -> torch.Tensor:
    """``diag(signs) blockdiag(H_b)`` in float64 (orthogonal)."""
    h = block_hadamard_matrix(features, block_size)
    return h if signs is None else signs.to(torch.float64)[:, None] * h


def rotate_weight_input(weight: torch.Tensor, block_size: int, signs: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``W Q`` for a weight ``[out, in]`` whose input is rotated ``x -> x Q`` (same output), with
    ``Q = diag(signs) blockdiag(H_b)`` along ``in``; in ``weight``'s dtype."""
    q = _rotation_matrix(weight.shape[-1], block_size, signs).to(weight.device)
    return (weight.detach().to(torch.float64) @ q).to(weight.dtype)


def rotate_weight_output(weight: torch.Tensor, bias: Optional[torch.Tensor], block_size: int,
                         signs: Optional[torch.Tensor] = None):
    """``(Q^T W, b Q)`` for a linear ``[out, in]`` whose output is to come out rotated
    (``y -> y Q``, ``Q`` along ``out``); in the weight's / bias's dtype."""
    q = _rotation_matrix(weight.shape[0], block_size, signs).to(weight.device)
    w = (q.T @ weight.detach().to(torch.float64)).to(weight.dtype)
    b = None if bias is None else (bias.detach().to(torch.float64) @ q).to(bias.dtype)
    return w, b


class ResidualRotation(nn.Module):
    """``x -> x Q`` (or ``x Q^T`` with ``inverse=True``) along the last dim, ``Q = diag(s)
    blockdiag(H_b)`` with signs ``s`` (a buffer); computed by the fast transform."""

    def __init__(self, signs: torch.Tensor, block_size: int, inverse: bool = False) -> None:
        super().__init__()
        check_block_size(block_size, int(signs.numel()), setting="residual rotation block_size")
        self.block_size = int(block_size)
        self.inverse = bool(inverse)
        self.register_buffer("signs", signs.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.signs.to(x.dtype)
        return fwht(x, self.block_size) * s if self.inverse else fwht(x * s, self.block_size)

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, inverse={self.inverse}"
