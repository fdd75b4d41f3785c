"""The block-by-block runner: find a model's repeated blocks, capture the first block's inputs
from the calibration data, and run one block at a time on them.

Blocks: the largest ``nn.ModuleList`` of same-typed modules that hold weight layers (Llama's
``model.model.layers``, BERT's ``encoder.layer``); a model without one is a single block, fed the
calibration items themselves. A block's inputs are every positional and keyword argument its
forward received (hidden states, attention masks, position embeddings, ...); the next block's are
the same with the hidden states replaced by this block's output, so only one block's activations
are held at a time. Function-mode quantization that :func:`groupquant.quantize_model` put around
the model's forward (attention GEMMs of W + A recipes) is entered around each block call too.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

__all__ = ["BlockInput", "find_blocks", "check_calibration_data", "capture_block_inputs", "run_block", "call_model"]


@dataclass
class BlockInput:
    """One calibration item's arguments to a block."""

    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]


class _Captured(Exception):
    """Raised by the capture hook to stop the model's forward at the first block."""


def _has_weight_layers(module: nn.Module) -> bool:
    return any(isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d)) for m in module.modules())


def find_blocks(model: nn.Module) -> Optional[Tuple[str, nn.ModuleList]]:
    """The model's repeated blocks as ``(name, ModuleList)``, or None (the model is one block)."""
    best = None
    best_size = 0
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) == 0:
            continue
        kinds = {type(child) for child in module}
        if len(kinds) != 1 or not all(_has_weight_layers(child) for child in module):
            continue
        size = sum(p.numel() for p in module.parameters())
        if size > best_size:
            best, best_size = (name, module), size
    return best


def check_calibration_data(calibration_data: Any) -> List[Any]:
    """The calibration items as a list: each a tensor (positional input) or a dict of keyword
    arguments. A ValueError names what is wrong (empty, an item of another type, an empty tensor)."""
    if isinstance(calibration_data, (torch.Tensor, dict)):
        raise TypeError("calibration_data must be an iterable of model inputs (a list of tensors or of dicts of "
                        f"keyword arguments), got a single {type(calibration_data).__name__}; wrap it in a list")
    try:
        items = list(calibration_data)
    except TypeError:
        raise TypeError("calibration_data must be an iterable of model inputs (tensors or dicts of keyword "
                        f"arguments), got {type(calibration_data).__name__}") from None
    if not items:
        raise ValueError("calibration_data is empty: give at least one model input (e.g. a [batch, seq_len] tensor "
                         "of token ids)")
    for index, item in enumerate(items):
        tensors = list(item.values()) if isinstance(item, dict) else [item]
        if not isinstance(item, (torch.Tensor, dict)):
            raise TypeError(f"calibration_data item {index} must be a tensor or a dict of keyword arguments, "
                            f"got {type(item).__name__}")
        for t in tensors:
            if isinstance(t, torch.Tensor) and (t.dim() == 0 or t.numel() == 0):
                raise ValueError(f"calibration_data item {index} holds a tensor of shape {tuple(t.shape)}: "
                                 "model inputs need a batch dim and at least one element")
    return items


def _describe(item: Any) -> str:
    if isinstance(item, dict):
        return "{" + ", ".join(f"{k}: {tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__}"
                               for k, v in item.items()) + "}"
    return f"tensor of shape {tuple(item.shape)}"


def call_model(model: nn.Module, item: Any, index: int) -> Any:
    """``model(item)`` or ``model(**item)``; a failure becomes a ValueError naming the item and its shapes."""
    try:
        return model(**item) if isinstance(item, dict) else model(item)
    except _Captured:
        raise
    except Exception as err:  # the model's own message, with the calibration item it came from
        raise ValueError(f"calibration_data item {index} ({_describe(item)}) does not fit the model: "
                         f"{type(err).__name__}: {err}") from err


def _functional_mode(model: nn.Module) -> Any:
    """The function mode quantize_model entered around the model's forward, or a null context."""
    mode = model.__dict__.get("_groupquant_functional")
    return mode if mode is not None else contextlib.nullcontext()


@torch.no_grad()
def capture_block_inputs(model: nn.Module, first: nn.Module, items: Sequence[Any]) -> List[BlockInput]:
    """What ``first`` receives when ``model`` runs each calibration item (the model stops there)."""
    captured: List[BlockInput] = []

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        kwargs = {k: v for k, v in kwargs.items() if k not in ("past_key_value", "past_key_values")}
        captured.append(BlockInput(tuple(args), dict(kwargs)))
        raise _Captured()

    handle = first.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        for index, item in enumerate(items):
            if isinstance(item, dict) and "use_cache" not in item and _takes_use_cache(model):
                item = {**item, "use_cache": False}
            try:
                call_model(model, item, index)
            except _Captured:
                continue
            raise ValueError(f"calibration_data item {index}: the model's forward never reached its first block")
    finally:
        handle.remove()
    return captured


def _takes_use_cache(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    return config is not None and hasattr(config, "use_cache")


def _hidden(output: Any) -> torch.Tensor:
    """A block's output hidden states (first element of a tuple output)."""
    return output[0] if isinstance(output, (tuple, list)) else output


@torch.no_grad()
def run_block(model: nn.Module, block: nn.Module, inputs: Sequence[BlockInput]) -> List[BlockInput]:
    """Run ``block`` on each input; the next block's inputs (outputs in place of the hidden states)."""
    out: List[BlockInput] = []
    with _functional_mode(model):
        for inp in inputs:
            hidden = _hidden(block(*inp.args, **inp.kwargs))
            if inp.args:
                out.append(BlockInput((hidden,) + tuple(inp.args[1:]), inp.kwargs))
            else:
                key = "hidden_states" if "hidden_states" in inp.kwargs else next(iter(inp.kwargs))
                out.append(BlockInput((), {**inp.kwargs, key: hidden}))
    return out
