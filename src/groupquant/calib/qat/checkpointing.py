"""Activation checkpointing of a model's blocks during training: each block keeps only its inputs
and runs its forward again in backward (``torch.utils.checkpoint``, non-reentrant), trading one
more forward per block for the activations inside it.

The blocks are the ones :func:`groupquant.calib.blocks.find_blocks` finds (Llama's
``model.layers``). The recomputation runs in backward, outside the model's forward, so the
function mode that :func:`groupquant.quantize_model` enters around the forward (the quantized
attention GEMMs of W + A recipes) is entered around the recomputed block too: the block computes
the same quantized values both times, and the gradients equal those without checkpointing.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, List

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..blocks import find_blocks

__all__ = ["checkpointed_blocks"]


def _mode_active(mode: Any) -> bool:
    """Whether torch function mode ``mode`` is on the current mode stack."""
    from torch.overrides import _get_current_function_mode_stack
    return any(m is mode for m in _get_current_function_mode_stack())


def _checkpointed(forward: Callable[..., Any], mode: Any) -> Callable[..., Any]:
    """``forward`` run under ``checkpoint`` while gradients are recorded (plain otherwise), inside
    ``mode`` when it is not already entered (the recomputation in backward)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        context = mode if mode is not None and not _mode_active(mode) else contextlib.nullcontext()
        with context:
            return forward(*args, **kwargs)

    def call(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return checkpoint(run, *args, use_reentrant=False, **kwargs)
    return call


@contextlib.contextmanager
def checkpointed_blocks(model: nn.Module, enabled: bool = True) -> Iterator[List[nn.Module]]:
    """Inside, each block of ``model`` runs checkpointed (module doc); yields the blocks (empty when
    ``enabled`` is False). A model without repeated blocks is a ValueError: there is nothing to
    checkpoint block by block."""
    if not enabled:
        yield []
        return
    found = find_blocks(model)
    if found is None:
        raise ValueError("qat(checkpoint_blocks=True): the model has no repeated blocks (an nn.ModuleList of "
                         "same-typed layers such as Llama's model.layers) to checkpoint")
    blocks = list(found[1])
    mode = model.__dict__.get("_groupquant_functional")
    for block in blocks:
        block.forward = _checkpointed(block.forward, mode)  # an instance attribute over the class's method
    try:
        yield blocks
    finally:
        for block in blocks:
            del block.forward
