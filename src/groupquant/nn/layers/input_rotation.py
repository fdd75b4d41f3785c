"""InputRotation: the online Walsh-Hadamard rotation of a quant layer's input (no parameters).

``rotate_model`` (:mod:`groupquant.calib.rotate`) rotates a layer's weight offline,
``W' = W H`` with ``H`` block-diagonal Hadamard (:mod:`groupquant.ops.hadamard`), and sets
``layer.input_rotation = InputRotation(b)``; the layer then computes
``input_quant(x H) (W H)^T = x W^T`` in float, with the rotated activation quantized. The module's
only state is its ``block_size``, kept as a persistent 0-d buffer so that a state dict records the
rotation (a quant layer re-creates the module when it loads a state dict holding one), and
``pack_model`` / ONNX export apply the same rotation.
"""
from __future__ import annotations

import torch
from torch import nn

from ...ops.hadamard import check_block_size, fwht

__all__ = ["InputRotation", "ROTATION_ATTR"]

#: the attribute (and state-dict key prefix) of a layer's input rotation
ROTATION_ATTR = "input_rotation"


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
