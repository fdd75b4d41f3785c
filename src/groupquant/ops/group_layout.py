"""The contracted group layout: one dimension split into k groups of ``block_size`` elements.

A block size of at least the dim's size is the whole dim (one block, no padding).

Names: ``block_size`` is the layout's word, used from here down (the functional ops' keyword,
``GroupQuantized``, ``PackedTensor`` and its records, the kernel records, checkpoint headers);
``group_size`` is the quantizer setting above (``QuantSpec`` / ``ScaleGranularity``), which
``ScaleGranularity.layout`` turns into a layout through :meth:`GroupLayout.build` (the one
resolution rule, :func:`normalize_block_size`). docs/architecture.md, "Names".
A tensor of shape ``S`` grouped along ``dim = d`` becomes ``S[:d] + (k, block_size) + S[d+1:]``
(a weight ``[O, I]`` grouped along its last dim gives ``[O, k, I/k]``), and a per-group quantity
(the scale) has shape ``S[:d] + (k, 1) + S[d+1:]``. A dim whose size is not a multiple of the
block is zero-padded at its end; the padding is removed when expanding back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["GroupLayout", "normalize_block_size"]


_INT64_MAX = 2 ** 63 - 1


def normalize_block_size(block_size: Optional[int], dim_size: int) -> int:
    """The block size to use along a dim of ``dim_size`` elements.

    ``None``, ``0`` or any size at least ``dim_size`` means the whole dim (one block of
    ``max(dim_size, 1)``); else a positive int. TypeError naming ``block_size`` for a non-int (or
    bool), ValueError for a negative one or one beyond int64.
    """
    if block_size is None:
        return max(int(dim_size), 1)
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"block_size must be an int (or None / 0 for the whole dim), got {block_size!r}")
    if block_size < 0:
        raise ValueError(f"block_size must be positive (or None / 0 for the whole dim), got {block_size}")
    if block_size > _INT64_MAX:
        raise ValueError(f"block_size must fit in int64 (at most 2**63 - 1), got {block_size}")
    if block_size == 0 or block_size >= dim_size:
        return max(int(dim_size), 1)
    return block_size


@dataclass(frozen=True)
class GroupLayout:
    """How a tensor of ``shape`` is split into groups along ``dim`` (non-negative)."""

    shape: Tuple[int, ...]
    dim: int
    block_size: int

    @classmethod
    def build(cls, shape: torch.Size, dim: int, block_size: Optional[int]) -> "GroupLayout":
        """Validate ``dim`` against ``shape`` and resolve ``block_size``."""
        ndim = len(shape)
        if ndim == 0:
            raise ValueError("cannot group a 0-d tensor; give it at least one dimension")
        if isinstance(dim, bool) or not isinstance(dim, int) or not -ndim <= dim < ndim:
            raise ValueError(f"dim={dim!r} is out of range for a tensor with {ndim} dimensions")
        dim = dim % ndim
        return cls(tuple(int(s) for s in shape), dim, normalize_block_size(block_size, shape[dim]))

    @property
    def dim_size(self) -> int:
        """Size of the grouped dim before padding."""
        return self.shape[self.dim]

    @property
    def num_groups(self) -> int:
        """k: number of groups along the dim (padding included)."""
        return -(-self.dim_size // self.block_size)

    @property
    def pad(self) -> int:
        """Zero elements appended to the grouped dim."""
        return self.num_groups * self.block_size - self.dim_size

    @property
    def contracted_shape(self) -> Tuple[int, ...]:
        """Shape of grouped values: ``S[:d] + (k, block_size) + S[d+1:]``."""
        d = self.dim
        return self.shape[:d] + (self.num_groups, self.block_size) + self.shape[d + 1:]

    @property
    def scale_shape(self) -> Tuple[int, ...]:
        """Shape of per-group quantities: ``S[:d] + (k, 1) + S[d+1:]``."""
        d = self.dim
        return self.shape[:d] + (self.num_groups, 1) + self.shape[d + 1:]

    @property
    def reduce_dim(self) -> int:
        """The dim of the contracted tensor that runs over one group's elements."""
        return self.dim + 1

    def contract(self, x: torch.Tensor) -> torch.Tensor:
        """Pad (with zeros) and view ``x`` in the contracted layout."""
        if tuple(x.shape) != self.shape:
            raise ValueError(f"tensor of shape {tuple(x.shape)} does not match the layout's {self.shape}")
        if self.pad:
            pads = [0, 0] * (len(self.shape) - 1 - self.dim) + [0, self.pad]
            x = F.pad(x, pads)
        return x.reshape(self.contracted_shape)

    def expand(self, xg: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`contract`: merge the group dims and drop the padding."""
        d = self.dim
        x = xg.reshape(self.shape[:d] + (self.num_groups * self.block_size,) + self.shape[d + 1:])
        return x.narrow(d, 0, self.dim_size) if self.pad else x

    def expand_scale(self, sg: torch.Tensor) -> torch.Tensor:
        """A per-group tensor (``scale_shape``) broadcast to the original shape (materialized)."""
        full = sg.expand(self.contracted_shape)
        return self.expand(full)
