"""InputRotation: the online Walsh-Hadamard rotation of a quant layer's input (no parameters).

``rotate_model`` (:mod:`groupquant.calib.rotate`) rotates a layer's weight offline,
``W' = W H`` with ``H`` block-diagonal Hadamard (:mod:`groupquant.ops.hadamard`), and sets
``layer.input_rotation = InputRotation(b)``; the layer then computes
``input_quant(x H) (W H)^T = x W^T`` in float, with the rotated activation quantized. The module's
only state is its ``block_size``, kept as a persistent 0-d buffer so that a state dict records the
rotation (a quant layer re-creates the module when it loads a state dict holding one), and
``pack_model`` / ONNX export apply the same rotation.

:class:`LearnedInputRotation` (``groupquant.calib.learned_rotation``, the ``learn_rotations``
calibration method) holds its own orthogonal block matrices instead of the Hadamard ones: a
persistent buffer ``matrix`` ``[n / b, b, b]`` (block ``i`` rotates features ``i b .. (i + 1) b - 1``),
so a state dict records it and a quant layer loading one re-creates it (ONNX export refuses it).
"""
from __future__ import annotations

import torch
from torch import nn

from ...ops.hadamard import check_block_size, fwht

__all__ = ["InputRotation", "LearnedInputRotation", "ROTATION_ATTR", "MATRIX_KEY"]

#: the attribute (and state-dict key prefix) of a layer's input rotation
ROTATION_ATTR = "input_rotation"
#: the buffer (and last state-dict key part) of a learned rotation's block matrices
MATRIX_KEY = "matrix"


class InputRotation(nn.Module):
    """``x -> x @ blockdiag(H_b, ...)`` along the last dim by the fast Walsh-Hadamard transform
    (``b = block_size``, a power of two dividing the feature count; orthonormal)."""

    def __init__(self, block_size: int) -> None:
        super().__init__()
        check_block_size(block_size, setting="input_rotation block_size")
        self.block_size = int(block_size)
        self.register_buffer("block_size_", torch.tensor(self.block_size, dtype=torch.int64))

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        """torch's loading, then the Python ``block_size`` from the loaded buffer."""
        super()._load_from_state_dict(*args, **kwargs)
        self.block_size = check_block_size(int(self.block_size_), setting="input_rotation block_size")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fwht(x, self.block_size)

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}"


class LearnedInputRotation(InputRotation):
    """``x -> x @ blockdiag(M_0, ..., M_{k-1})`` along the last dim, ``M_i`` the ``[b, b]`` orthogonal
    matrices of the buffer ``matrix`` ``[k, b, b]`` (``k b`` features); computed in ``x``'s dtype.
    Orthogonality is the caller's contract (``learn_rotations`` builds them by a Cayley transform in
    float64); a matrix that is not square per block is a ValueError."""

    def __init__(self, matrix: torch.Tensor) -> None:
        if matrix.dim() != 3 or matrix.shape[1] != matrix.shape[2] or matrix.shape[0] < 1:
            raise ValueError(f"LearnedInputRotation: matrix must be [blocks, b, b], got {tuple(matrix.shape)}")
        super().__init__(int(matrix.shape[1]))
        self.register_buffer(MATRIX_KEY, matrix.detach().clone().float())

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """A state dict's matrix of another shape replaces the buffer (loading re-creates the module
        with a placeholder of the saved shape, see ``QuantLayerMixin``)."""
        key = prefix + MATRIX_KEY
        if key in state_dict and state_dict[key].shape != self.matrix.shape:
            self.matrix = torch.empty_like(state_dict[key], dtype=torch.float32)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, b = int(self.matrix.shape[0]), int(self.matrix.shape[1])
        if x.shape[-1] != k * b:
            raise ValueError(f"LearnedInputRotation: the input has {x.shape[-1]} features, the rotation {k} blocks "
                             f"of {b} = {k * b}")
        y = torch.einsum("nki,kij->nkj", x.reshape(-1, k, b), self.matrix.to(x.dtype))
        return y.reshape(x.shape)

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, blocks={int(self.matrix.shape[0])}, learned"
