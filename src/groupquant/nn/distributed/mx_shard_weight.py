"""The sharded float32 master weight whose FSDP2 all-gather moves MX codes: :class:`MXShardWeight`.

FSDP2 (``torch.distributed.fsdp.fully_shard``) gathers a parameter through two methods of the
tensor subclass its local shard is (the extension points torchao's float8 weights use):

- ``fsdp_pre_all_gather(mesh, outer_size, outer_stride, module, mp_policy)`` returns the tensors
  each rank sends and metadata. Here: for every quantization in the layer's :class:`GatherPlan`
  (the forward weight quantizer, and the input-gradient one of a quantized backward), the
  shard's packed element codes and scale codes (uint8, :func:`groupquant.packing.shard_payload.encode_shard`);
  a two-level scale (NVFP4) first all-reduces the shards' amaxes over the mesh (MAX, NaN kept).
- ``fsdp_post_all_gather(outputs, metadata, param_dtype, *, out=None)`` turns the gathered bytes
  (every rank's, end to end along dim 0) into the unsharded weight: a
  :class:`groupquant.proxy.GatheredWeight` the layer's proxies read without quantizing again;
  with ``out`` (every gather after the first) it refills that weight in place.

Everything else sees a float32 tensor: the shard wraps the float32 master data (``_data``); any
operation runs on that data (the optimizer step, ``state_dict``, DCP, ``load_state_dict``), and
the layout operations FSDP2 applies while sharding (split, narrow, view, copy, ...) keep the
wrapper so the extension survives. The quantized dtype is the weight's, or FSDP2's
``param_dtype`` when mixed precision sets one (the float route quantizes the cast weight too).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_map_only

from ...packing.shard_payload import ShardCodec, encode_shard, shard_amax
from ...proxy.gathered_weight import GatheredCodes, GatheredWeight

__all__ = ["GatherPlan", "MXShardWeight"]


@dataclass(frozen=True)
class GatherPlan:
    """What one layer's all-gather moves: the specs of the weight quantizations the layer reads
    (forward first) and their codecs; ``where``: the layer's name, for errors."""

    where: str
    specs: Tuple[Any, ...]
    codecs: Tuple[ShardCodec, ...]


@dataclass(frozen=True)
class _GatherMeta:
    """pre -> post all-gather: the whole weight's shape, the dtype quantized in, the tensor scales."""

    shape: Tuple[int, ...]
    dtype: torch.dtype
    tensor_scales: Tuple[Optional[torch.Tensor], ...]


_aten = torch.ops.aten
#: Operations whose result stays a shard wrapper (FSDP2's sharding, copies, aliases).
_KEEP = {_aten.detach.default, _aten.alias.default, _aten.view.default, _aten._unsafe_view.default,
         _aten.as_strided.default, _aten.slice.Tensor, _aten.split.Tensor, _aten.split_with_sizes.default,
         _aten.new_zeros.default, _aten.new_empty.default, _aten.empty_like.default, _aten.clone.default,
         _aten._to_copy.default, _aten.copy_.default, _aten._pin_memory.default, _aten.narrow.default}


def _global_amax(shard: torch.Tensor, group: Optional[dist.ProcessGroup]) -> torch.Tensor:
    """The amax of the whole weight from each rank's shard: one all-reduce (MAX) of the finite
    amax and a NaN flag (a NaN anywhere makes it NaN, as the whole tensor's amax would be)."""
    amax = shard_amax(shard)
    nan = torch.isnan(amax)
    both = torch.stack([torch.where(nan, torch.zeros_like(amax), amax), nan.float()])
    dist.all_reduce(both, op=dist.ReduceOp.MAX, group=group)
    return torch.where(both[1] > 0, torch.full_like(both[0], float("nan")), both[0])


class MXShardWeight(torch.Tensor):
    """A layer's float32 master weight (or its FSDP2 shard) whose all-gather moves MX codes."""

    _data: torch.Tensor
    _plan: GatherPlan

    @staticmethod
    def __new__(cls, data: torch.Tensor, plan: GatherPlan) -> "MXShardWeight":
        t = torch.Tensor._make_wrapper_subclass(cls, data.size(), strides=data.stride(),
                                                storage_offset=data.storage_offset(), dtype=data.dtype,
                                                device=data.device, layout=data.layout,
                                                requires_grad=data.requires_grad)
        t._data = data
        t._plan = plan
        return t

    def __repr__(self) -> str:
        return f"MXShardWeight({self._data!r}, layer={self._plan.where!r})"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        plan = next(a._plan for a in args if isinstance(a, MXShardWeight)) if any(
            isinstance(a, MXShardWeight) for a in args) else None
        args_, kwargs_ = tree_map_only(MXShardWeight, lambda t: t._data, (args, kwargs or {}))
        out = func(*args_, **kwargs_)
        if func._schema.name.endswith("_") and args and isinstance(args[0], MXShardWeight):
            return args[0]  # in place: the wrapper whose data changed
        if func not in _KEEP or plan is None:
            return out
        return tree_map_only(torch.Tensor, lambda t: cls(t, plan), out)

    def __tensor_flatten__(self):
        return ["_data"], self._plan

    @staticmethod
    def __tensor_unflatten__(inner, plan, outer_size, outer_stride):
        return MXShardWeight(inner["_data"], plan)

    # ---- FSDP2 extension points ---------------------------------------------------------------

    def fsdp_pre_all_gather(self, mesh, outer_size, outer_stride, module, mp_policy):
        """Each quantization's packed codes and scale codes of this shard (see module doc)."""
        plan = self._plan
        world = mesh.size()
        if outer_size[0] % world:
            raise ValueError(f"{plan.where}: the MX all-gather needs rows split evenly; weight of "
                             f"{tuple(outer_size)} over {world} ranks (make out_features a multiple of the world size)")
        dtype = getattr(mp_policy, "param_dtype", None) or self._data.dtype
        shard = self._data.detach().to(dtype)
        amax = _global_amax(shard, mesh.get_group()) if any(c.settings.tensor_scale for c in plan.codecs) else None
        payloads = [encode_shard(shard, codec, amax, plan.where) for codec in plan.codecs]
        inputs = tuple(t for p in payloads for t in (p.codes, p.scales))
        return inputs, _GatherMeta(tuple(outer_size), dtype, tuple(p.tensor_scale for p in payloads))

    def fsdp_post_all_gather(self, all_gather_outputs, metadata: _GatherMeta, param_dtype, *, out=None):
        """The unsharded :class:`GatheredWeight` from every rank's codes (refilled into ``out``)."""
        plan = self._plan
        by_spec = {}
        for i, (spec, codec) in enumerate(zip(plan.specs, plan.codecs)):
            codes, scales = all_gather_outputs[2 * i], all_gather_outputs[2 * i + 1]
            by_spec[spec] = GatheredCodes(codes.reshape(-1), scales.reshape(-1), metadata.tensor_scales[i], codec)
        if out is not None:
            out.refill(by_spec)
            return None
        return GatheredWeight.of(metadata.shape, metadata.dtype, by_spec), ()
