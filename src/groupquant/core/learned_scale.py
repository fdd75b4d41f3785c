"""A learned scale: an ``nn.Parameter`` initialised from statistics (of the weight, or of the first call).

The parameter, ``learned_scale``, has the granularity's scale shape (``[1]`` per tensor: FSDP2
refuses 0-d parameters; keepdim per channel, or the contracted ``[O, k, 1]`` per group: never the
expanded ``[O, I]``). It holds the scale
itself (``fp``) or its base-2 exponent (``power_of_two``, rounded to an integer exponent in the
forward pass with a straight-through gradient, so the scale stays E8M0-representable). Built
without a shape (a quantizer used on its own), the parameter is created on the first call:
create optimizers after that call. The first forward call (training or not) sets it from the
statistic of the tensor it sees and marks the ``initialized`` buffer, so weights copied in after
construction are what it starts from; both are saved in the state dict. A layer's weight scale is
set from the weight by the layer (:meth:`LearnedScale.init_from`, ``sync=False``) when it is built and
when it is given a weight, so it does not depend on a first call (which FSDP2 would not keep: it
runs on the gathered copy of the parameter; a first call under FSDP2 writes into the shard too,
:mod:`.sharded_param`). An activation scale's first statistic is reduced
across data-parallel ranks (:mod:`.dist_reduce`), so every rank starts from the global batch's.
The ``initialized`` buffer is read again when the parameter was not yet set (an in-place
``torch.distributed.checkpoint.load`` writes into it). State dicts saved before the parameter was
renamed (``...scale_impl.value``) or with a 0-d per-tensor scale still load.
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence

import torch
from torch import nn

from .dist_reduce import reduce_stat, reduction_for
from .quant_spec import QuantSpec
from .sharded_param import write_through
from .restrict import from_learned, scale_from_stat, to_learned
from .stats import ScalingStats

__all__ = ["LearnedScale"]


def _data_parallel() -> bool:
    """Whether torch.distributed runs with more than one rank."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1

_OLD_NAME = "value"


class LearnedScale(nn.Module):
    """``forward(x)`` -> float32 scale (differentiable in :attr:`learned_scale`).

    Args:
        spec: the quantizer spec (statistic, format, granularity, restriction, rule, ``scaling_min_val``).
        shape: the scale shape (``spec.scale_granularity.scale_shape(tensor_shape)``), or None to
            take it from the first tensor seen.
    """

    def __init__(self, spec: QuantSpec, shape: Optional[Sequence[int]]) -> None:
        super().__init__()
        if not spec.scaling_min_val > 0:
            raise ValueError(f"scaling_min_val must be a positive number, got {spec.scaling_min_val!r}")
        self.spec = spec
        self.stats = ScalingStats(spec.stats_op, spec.percentile)
        self.granularity = spec.scale_granularity
        self.learned_scale = nn.Parameter(self._placeholder(shape if shape is not None else ()))
        self.shape_known = shape is not None
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))
        self._ready = False  # Python mirror of `initialized`: no device sync per call

    @property
    def restrict(self) -> str:
        return self.spec.restrict

    def _placeholder(self, shape: Sequence[int]) -> torch.Tensor:
        """The value before initialisation: scale 1, stored with at least one dim (a per-tensor
        scale ``()`` is kept as ``[1]``)."""
        stored = tuple(shape) or (1,)
        return torch.zeros(stored) if self.restrict == "power_of_two" else torch.ones(stored)

    def _stored(self, shape: Sequence[int]) -> tuple:
        """The parameter's shape for scale shape ``shape`` (``()`` -> ``(1,)``)."""
        return tuple(shape) or (1,)

    def extra_repr(self) -> str:
        return f"shape={tuple(self.learned_scale.shape)}, restrict={self.restrict}, mode={self.spec.scale_rounding}"

    @torch.no_grad()
    def init_from(self, x: torch.Tensor, sync: bool = True) -> None:
        """Set the parameter from the statistic of ``x`` and mark it initialised. ``sync``: reduce
        the statistic across data-parallel ranks first (activations; a weight, the same on every
        rank, is set with ``sync=False``)."""
        stat = self.stats(x.detach(), self.granularity)
        if sync:
            stat = reduce_stat(stat, reduction_for(self.spec.stats_op))
        scale = scale_from_stat(stat, self.spec.fmt, self.spec.scale_rule)
        if not self.shape_known:
            if _data_parallel():
                warnings.warn(f"{self.spec.name}: a learned scale of shape {tuple(scale.shape)} is created by this "
                              "first call while torch.distributed runs; DDP / FSDP2 only know parameters that "
                              "existed when they wrapped the model: run one forward before wrapping it",
                              UserWarning, stacklevel=2)
            self.learned_scale = nn.Parameter(self._placeholder(scale.shape).to(self.learned_scale.device))
            self.shape_known = True
        scale = scale.reshape(self._stored(scale.shape))
        if tuple(scale.shape) != tuple(self.learned_scale.shape):
            raise ValueError(f"a tensor of shape {tuple(x.shape)} has scale shape {tuple(scale.shape)}, "
                             f"but this learned scale was built for {tuple(self.learned_scale.shape)}")
        write_through(self, "learned_scale", to_learned(scale, self.restrict))  # (FSDP2: into the shard too)
        self.initialized.fill_(True)
        self._ready = True

    def forget(self) -> None:
        """Mark the scale not initialised: the next call (or :meth:`init_from`) sets it again."""
        self.initialized.fill_(False)
        self._ready = False

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        """A scale whose shape was not known yet takes the saved shape; the old name loads too."""
        if prefix + _OLD_NAME in state_dict and prefix + "learned_scale" not in state_dict:
            state_dict[prefix + "learned_scale"] = state_dict.pop(prefix + _OLD_NAME)
        saved = state_dict.get(prefix + "learned_scale")
        if saved is not None and saved.dim() == 0:  # (saved before per-tensor scales were stored as [1])
            state_dict[prefix + "learned_scale"] = saved = saved.reshape(1)
        if not self.shape_known and saved is not None:
            self.learned_scale = nn.Parameter(self._placeholder(saved.shape).to(self.learned_scale.device))
            self.shape_known = True
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._ready = bool(self.initialized)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._ready:
            self._ready = bool(self.initialized)  # (buffers written in place, e.g. by dcp.load)
            if not self._ready:
                self.init_from(x)
        expected = tuple(self.granularity.scale_shape(x.shape))
        if self._stored(expected) != tuple(self.learned_scale.shape):
            raise ValueError(f"a tensor of shape {tuple(x.shape)} has scale shape {expected}, "
                             f"but this learned scale was built for {tuple(self.learned_scale.shape)}")
        scale = from_learned(self.learned_scale, self.restrict, self.spec.scaling_min_val)
        return scale.reshape(expected) if not expected else scale
