"""Writing a value a forward computed into the parameter FSDP2 keeps (its shard), not only the copy it gathered.

Inside a forward under FSDP2 (``fully_shard``), a module's parameter is the gathered, unsharded
copy: FSDP2 drops it after the forward and keeps the sharded parameter (a ``DTensor``), so a
value written into the parameter during the forward (a learned scale's first initialisation) is
lost. :func:`write_through` writes it into both. FSDP2 offers no public way from a parameter to
its shard, so this reads the FSDP2 states torch registers for its composable APIs
(``torch.distributed._composable_state``) and their parameter records (``_module_info``,
``sharded_param``); the 2-process tests (``tests/distributed``) check that the write is kept.
Outside FSDP2 it is a plain ``copy_``.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

__all__ = ["write_through", "fsdp_sharded_param", "is_sharded"]


def _param_groups(state: object) -> list:
    """An FSDP2 state's parameter groups: the list torch 2.12+ keeps (``_fsdp_param_groups``), or
    torch 2.11's one group (``_fsdp_param_group``, None when the module holds no parameter)."""
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is not None:
        return list(groups)
    group = getattr(state, "_fsdp_param_group", None)
    return [group] if group is not None else []


def _fsdp_records():
    """FSDP2's parameter records of every live FSDP2 state (none without FSDP2)."""
    try:
        from torch.distributed._composable_state import _module_state_mapping
    except ImportError:
        return
    for ref in list(_module_state_mapping.values()):
        for group in _param_groups(ref()):
            yield from getattr(group, "fsdp_params", ())


def is_sharded(t: torch.Tensor) -> bool:
    """Whether ``t`` is a sharded parameter (a ``DTensor``) or FSDP2's gathered copy of one."""
    if hasattr(t, "full_tensor") or hasattr(t, "device_mesh"):
        return True
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return False
    return any(getattr(record, "_unsharded_param", None) is t for record in _fsdp_records())


def fsdp_sharded_param(module: nn.Module, name: str) -> Optional[torch.Tensor]:
    """The sharded parameter FSDP2 keeps for ``module.<name>``, or None when FSDP2 does not manage it."""
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return None
    for record in _fsdp_records():
        info = getattr(record, "_module_info", None)
        if info is not None and info.module is module and info.param_name == name:
            return record.sharded_param
    return None


@torch.no_grad()
def write_through(module: nn.Module, name: str, value: torch.Tensor) -> None:
    """``module.<name>.copy_(value)``, and under FSDP2 into its shard too (``value``: the full
    parameter's value, the same on every rank)."""
    param = getattr(module, name)
    sharded = fsdp_sharded_param(module, name)
    if sharded is not None and sharded is not param:
        from torch.distributed.tensor import distribute_tensor
        sharded.copy_(distribute_tensor(value.to(sharded.dtype), sharded.device_mesh, sharded.placements))
    if hasattr(param, "full_tensor"):  # (a DTensor outside the forward)
        from torch.distributed.tensor import distribute_tensor
        param.copy_(distribute_tensor(value.to(param.dtype), param.device_mesh, param.placements))
        return
    param.copy_(value.to(param))
