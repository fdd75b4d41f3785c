"""Which elements share one scale: the whole tensor, one channel, or one group along a dim.

``tensor``  one scale (a 0-d tensor).
``channel`` one scale per index of ``dim`` (keepdim shape: 1 everywhere except ``dim``).
``group``   one scale per group of ``group_size`` consecutive elements along ``dim``, kept in the
            contracted layout of :class:`groupquant.ops.GroupLayout` (a weight ``[O, I]`` grouped
            along dim 1 has scales ``[O, k, 1]``): the expanded ``[O, I]`` scale is never built.

``group_size`` is the quantizer setting's name; the layout it resolves to (:meth:`ScaleGranularity.layout`,
the one crossing) and everything in ``ops`` / ``packing`` below call the same number ``block_size``
(docs/architecture.md, "Names").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch

from ..inject import ConfigError
from ..ops import GroupLayout

__all__ = ["GRANULARITIES", "ScaleGranularity"]

GRANULARITIES = ("tensor", "channel", "group")


def _normalize_dim(dim: int, ndim: int, what: str) -> int:
    """``dim`` made non-negative for a tensor of ``ndim`` dims; ConfigError (a ValueError) naming ``what``."""
    if not -ndim <= dim < ndim:
        raise ConfigError(what, f"{what}={dim} is out of range for a tensor with {ndim} dimensions")
    return dim % ndim


@dataclass(frozen=True)
class ScaleGranularity:
    """Scale sharing: ``kind`` in :data:`GRANULARITIES`, ``dim`` (channel or group dim) and
    ``group_size`` (elements per group, ``kind='group'`` only)."""

    kind: str
    dim: Optional[int] = None
    group_size: Optional[int] = None

    def __post_init__(self) -> None:
        if self.kind not in GRANULARITIES:
            raise ValueError(f"kind must be one of {GRANULARITIES}, got {self.kind!r}")
        if self.kind != "tensor" and (isinstance(self.dim, bool) or not isinstance(self.dim, int)):
            raise ValueError(f"kind={self.kind!r} needs an integer dim, got {self.dim!r}")
        if self.kind == "group":
            size = self.group_size
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise ValueError(f"kind='group' needs a positive integer group_size, got {size!r}")

    @property
    def is_group(self) -> bool:
        return self.kind == "group"

    def layout(self, shape: Sequence[int]) -> GroupLayout:
        """The group layout of a tensor of ``shape`` (``kind='group'`` only)."""
        if not self.is_group:
            raise ValueError(f"a {self.kind!r} granularity has no group layout")
        return GroupLayout.build(torch.Size(shape), _normalize_dim(self.dim, len(shape), "group_dim"),
                                 self.group_size)

    def group_dim_of(self, ndim: int) -> int:
        """The non-negative group dim for a tensor of ``ndim`` dims (``kind='group'``)."""
        return _normalize_dim(self.dim, ndim, "group_dim")

    def channel_dim(self, ndim: int) -> int:
        """The non-negative channel dim for a tensor of ``ndim`` dims (``kind='channel'``)."""
        return _normalize_dim(self.dim, ndim, "channel_dim")

    def op_block(self, ndim: int) -> Tuple[int, int]:
        """(block_size, dim) of the group op that gives one scale per sharing unit, for a tensor of
        ``ndim`` dims: groups as they are; every other kind on the 2-D view that
        ``groupquant.core.dynamic_quant`` makes (one block of the whole dim, block_size 0): the
        tensor as ``[1, N]`` (dim 1), channels of dim 0 as ``[C, N]`` (dim 1), of another dim as
        ``[N, C]`` (dim 0)."""
        if self.kind == "group":
            return self.group_size, self.group_dim_of(ndim)
        if self.kind == "tensor" or self.channel_dim(ndim) == 0:
            return 0, 1
        return 0, 0

    def scale_shape(self, shape: Sequence[int]) -> Tuple[int, ...]:
        """Shape of the scale of a tensor of ``shape``: ``()``, keepdim, or the contracted ``[.., k, 1, ..]``."""
        shape = tuple(int(s) for s in shape)
        if self.kind == "tensor":
            return ()
        if self.kind == "channel":
            d = self.channel_dim(len(shape))
            return tuple(s if i == d else 1 for i, s in enumerate(shape))
        return self.layout(shape).scale_shape

    def view(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as the scale broadcasts against it: contracted for groups, unchanged otherwise."""
        return self.layout(x.shape).contract(x) if self.is_group else x

    def reduce_dims(self, viewed_ndim: int, shape: Sequence[int]) -> Tuple[int, ...]:
        """Dims of the viewed tensor that one scale reduces over."""
        if self.kind == "tensor":
            return tuple(range(viewed_ndim))
        if self.kind == "channel":
            d = self.channel_dim(len(shape))
            return tuple(i for i in range(viewed_ndim) if i != d)
        return (self.layout(shape).reduce_dim,)
