"""Data parallelism of quantization-aware training: how the student runs when torch.distributed
holds more than one rank (``qat(parallel=...)``).

- ``"ddp"`` (and ``None``, the default, under a process group): the student itself is wrapped in
  ``DistributedDataParallel``; every rank holds the whole model, its gradients and its optimiser
  state; the gradients are averaged once per optimiser step.
- ``"fsdp2"``: a copy of the converted student is sharded with FSDP2
  (``torch.distributed.fsdp.fully_shard``: each repeated block its own unit, then the root);
  parameters, gradients and optimiser state are split along dim 0 over the ranks, each block's
  weights are all-gathered for its forward and again for its backward, and the gradients are
  reduce-scattered (averaged) once per optimiser step. After training, the trained values are
  gathered (``DTensor.full_tensor``) into the caller's unsharded model, which ``qat`` returns,
  so ``state_dict``, ``pack_model`` and ``groupquant.save`` see an ordinary model.

Either way each rank takes its share of the micro-batches (:class:`~.data.MicroBatchOrder`), so
``w`` ranks with ``a`` micro-batches each compute what one process computes with ``a * w``.
With one rank (or no process group) nothing is wrapped.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Any, Dict, Iterator

import torch
import torch.distributed as dist
from torch import nn

from ..blocks import find_blocks
from .trainable import Trainable

__all__ = ["PARALLEL", "world_and_rank", "check_parallel", "is_sharded", "Parallel", "gradient_sync"]

#: ``parallel=`` values: None (DDP under a process group of more than one rank), "ddp", "fsdp2".
PARALLEL = (None, "ddp", "fsdp2")


def world_and_rank() -> tuple:
    """``(world size, rank)`` of the default process group, ``(1, 0)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model`` (or a module inside it) was already sharded with FSDP2's ``fully_shard``."""
    if not dist.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule
    return any(isinstance(m, FSDPModule) for m in model.modules())


def check_parallel(parallel: Any, model: nn.Module) -> str:
    """The data-parallel mode to run, ``"none"``, ``"ddp"`` or ``"fsdp2"``, from ``parallel=``
    (module doc); ValueErrors name the setting: an unknown value, "ddp" / "fsdp2" without an
    initialised process group, a student the caller already sharded (qat shards its own copy)."""
    if parallel not in PARALLEL:
        raise ValueError(f"qat: parallel must be None, 'ddp' or 'fsdp2', got {parallel!r}")
    if is_sharded(model):
        raise ValueError("qat: the model is already sharded with fully_shard; give the unsharded model and "
                         "parallel='fsdp2' (qat converts it, shards a copy and returns the trained unsharded model)")
    initialised = dist.is_available() and dist.is_initialized()
    if parallel is not None and not initialised:
        raise ValueError(f"qat(parallel={parallel!r}) needs torch.distributed initialised (init_process_group, e.g. "
                         "under torchrun); without a process group leave parallel=None (one process)")
    if world_and_rank()[0] == 1:
        return "none"
    return parallel or "ddp"


def _fully_shard(model: nn.Module) -> nn.Module:
    """``model`` sharded in place with FSDP2: each repeated block (:func:`find_blocks`) a unit, then
    the root, over a 1-D mesh of every rank on the model's device type (FSDP2's default mesh
    would take CUDA whenever it is there, and move a CPU model onto it)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    found = find_blocks(model)
    for block in (found[1] if found is not None else ()):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _full(value: Any) -> Any:
    """A DTensor's whole value (an all-gather, every rank), or ``value``."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value


class Parallel:
    """The student as the training loop runs it under ``mode`` (module doc).

    ``student``: the model whose parameters the loop trains, evaluates and snapshots (the caller's
    model, or its FSDP2-sharded copy); ``engine``: what the forward calls (the student, or its DDP
    wrapper); ``trainable``: the student's trainable parameters (the sharded ones under FSDP2).
    :meth:`finish` puts the trained values into the caller's model."""

    def __init__(self, model: nn.Module, trainable: Trainable, mode: str) -> None:
        self.model, self.mode = model, mode
        if mode == "fsdp2":
            # (the copy is taken inside frozen_except, so it keeps which parameters require grad)
            self.student = _fully_shard(copy.deepcopy(model))
            named: Dict[str, nn.Parameter] = dict(self.student.named_parameters(remove_duplicate=False))
            self.trainable = Trainable({part: tuple((name, named[name]) for name, _ in params)
                                        for part, params in trainable.parts.items()})
            self.engine: nn.Module = self.student
        else:
            self.student, self.trainable, self.engine = model, trainable, model
            if mode == "ddp":
                device = next(model.parameters()).device
                ids = [device] if device.type == "cuda" else None
                self.engine = nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def release(self) -> None:
        """Under FSDP2, put every unit back to its shards (a forward without backward leaves the
        root's parameters gathered; an in-place write between then and the next forward goes to
        the shards)."""
        if self.mode == "fsdp2":
            from torch.distributed.fsdp import FSDPModule
            for module in self.student.modules():
                if isinstance(module, FSDPModule):
                    module.reshard()

    @torch.no_grad()
    def finish(self) -> None:
        """Under FSDP2, load the sharded student's whole state (parameters gathered on every rank,
        buffers, the functional quantizers' state) into the caller's unsharded model."""
        if self.mode != "fsdp2":
            return
        self.release()
        state = {key: _full(value) for key, value in self.student.state_dict().items()}
        self.model.load_state_dict(state)


@contextlib.contextmanager
def gradient_sync(engine: nn.Module, enabled: bool) -> Iterator[None]:
    """Inside, a backward of ``engine`` averages the gradients over the ranks only when ``enabled``
    (the last micro-batch of a step): DDP's ``no_sync``, FSDP2's ``set_requires_gradient_sync``;
    nothing to do for a plain module."""
    if isinstance(engine, nn.parallel.DistributedDataParallel):
        with contextlib.nullcontext() if enabled else engine.no_sync():
            yield
        return
    from torch.distributed.fsdp import FSDPModule
    if not isinstance(engine, FSDPModule):  # (the FSDP2 engine is sharded at its root: _fully_shard)
        yield
        return
    engine.set_requires_gradient_sync(enabled)  # (recursively: every FSDP2 unit of the engine)
    try:
        yield
    finally:
        engine.set_requires_gradient_sync(True)
