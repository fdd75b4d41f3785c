"""The one place that reduces a quantizer statistic across data-parallel ranks.

A statistic a quantizer keeps beyond one call (a running statistic, the first statistic a learned
activation scale starts from) must be the same on every rank, or DDP / FSDP2 training stops
meaning what a single process means. :func:`reduce_stat` is the one rule: when
``torch.distributed`` is available and initialised, and syncing is on, the statistic is
all-reduced over the group (the default group, or the one :func:`stat_sync` names) with the
operation its statistic asks for (``max`` for an abs-max, ``mean`` otherwise: a percentile or a
mean is averaged, as DDP averages gradients); otherwise it is returned as it is. Syncing is on by
default and switched off for a block of code by ``with stat_sync(False):`` (for speed: each
update is then one all-reduce less, and each rank keeps its own statistic); ``stat_sync(group=g)``
names another process group (e.g. the data-parallel group of a 2-D mesh).
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch

__all__ = ["reduce_stat", "stat_sync", "StatSync", "current_stat_sync", "reduction_for"]


@dataclass(frozen=True)
class StatSync:
    """Whether statistics are reduced across ranks (``enabled``) and over which process group
    (``group``: None for the default group)."""

    enabled: bool = True
    group: Any = None


_STATE = threading.local()


def current_stat_sync() -> StatSync:
    """The setting in force in this thread (on, default group, unless :func:`stat_sync` changed it)."""
    return getattr(_STATE, "sync", None) or StatSync()


@contextlib.contextmanager
def stat_sync(enabled: bool = True, group: Any = None) -> Iterator[StatSync]:
    """Within the block, reduce quantizer statistics across ranks (``enabled=True``, over ``group``,
    None: the default group) or not (``enabled=False``: each rank keeps its own)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"stat_sync(enabled=...) must be True or False, got {enabled!r}")
    previous = getattr(_STATE, "sync", None)
    _STATE.sync = StatSync(enabled, group)
    try:
        yield _STATE.sync
    finally:
        _STATE.sync = previous


def reduction_for(stats_op: str) -> str:
    """The cross-rank reduction of a statistic: ``max`` for ``abs_max`` (the max of the ranks'
    maxima is the whole batch's), ``mean`` for the others (``percentile``, ``mse``)."""
    return "max" if stats_op == "abs_max" else "mean"


def _distributed_group(sync: StatSync) -> Optional[Any]:
    """The group to reduce over, or None when there is nothing to reduce (no dist, one rank)."""
    if not sync.enabled or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return None
    group = sync.group if sync.group is not None else torch.distributed.group.WORLD
    return group if torch.distributed.get_world_size(group) > 1 else None


@torch.no_grad()
def reduce_stat(stat: torch.Tensor, reduction: str) -> torch.Tensor:
    """``stat`` reduced across the ranks of the current :class:`StatSync` (``reduction``: ``max``
    or ``mean``, see :func:`reduction_for`), or ``stat`` itself where there is nothing to reduce.
    A new float32 tensor of ``stat``'s shape; no gradient flows through it."""
    if reduction not in ("max", "mean"):
        raise ValueError(f"reduce_stat reduction must be 'max' or 'mean', got {reduction!r}")
    group = _distributed_group(current_stat_sync())
    if group is None:
        return stat
    out = stat.detach().to(torch.float32).clone()
    op = torch.distributed.ReduceOp.MAX if reduction == "max" else torch.distributed.ReduceOp.SUM
    torch.distributed.all_reduce(out, op=op, group=group)
    if reduction == "mean":
        out /= torch.distributed.get_world_size(group)
    return out.to(stat.dtype)
