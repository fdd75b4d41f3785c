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

__all__ = ["BlockInput", "NotReached", "find_blocks", "find_stacks", "check_calibration_data", "capture_block_inputs",
           "run_block", "call_model", "replay_is_faithful", "run_model_until"]


@dataclass
class BlockInput:
    """One calibration item's arguments to a block."""

    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]


class _Captured(Exception):
    """Raised by the capture hook to stop the model's forward at the first block."""


class NotReached(ValueError):
    """The model's forward on a calibration item never ran the block asked for."""


def _has_weight_layers(module: nn.Module) -> bool:
    return any(isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d)) for m in module.modules())


def _is_stack(module: nn.Module) -> bool:
    return (isinstance(module, nn.ModuleList) and len(module) > 0 and len({type(child) for child in module}) == 1
            and all(_has_weight_layers(child) for child in module))


def find_stacks(model: nn.Module) -> List[Tuple[str, nn.ModuleList]]:
    """Every stack of repeated blocks as ``(name, ModuleList)``, outermost only, in module order
    (an empty list: the model is one block)."""
    stacks: List[Tuple[str, nn.ModuleList]] = []
    for name, module in model.named_modules():
        if _is_stack(module) and not any(name.startswith(outer + ".") or not outer for outer, _ in stacks):
            stacks.append((name, module))
    return stacks


def find_blocks(model: nn.Module) -> Optional[Tuple[str, nn.ModuleList]]:
    """The model's largest stack of repeated blocks as ``(name, ModuleList)``, or None."""
    stacks = find_stacks(model)
    return max(stacks, key=lambda s: sum(p.numel() for p in s[1].parameters())) if stacks else None


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
        if not isinstance(item, (torch.Tensor, dict)):
            raise TypeError(f"calibration_data item {index} must be a tensor or a dict of keyword arguments, "
                            f"got {type(item).__name__}")
        tensors = item.items() if isinstance(item, dict) else [("", item)]
        for key, t in tensors:
            where = f"calibration_data item {index}" + (f" [{key!r}]" if key else "")
            if not isinstance(t, torch.Tensor):
                continue
            if t.dim() == 0 or t.numel() == 0:
                raise ValueError(f"{where} holds a tensor of shape {tuple(t.shape)}: "
                                 "model inputs need a batch dim and at least one element")
            if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
                bad = int((~torch.isfinite(t)).sum())
                raise ValueError(f"{where} holds {bad} non-finite value(s) (NaN / Inf) in a tensor of shape "
                                 f"{tuple(t.shape)}: calibration statistics would be NaN; give finite inputs")
    return items


def _describe(item: Any) -> str:
    if isinstance(item, dict):
        return "{" + ", ".join(f"{k}: {tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__}"
                               for k, v in item.items()) + "}"
    return f"tensor of shape {tuple(item.shape)}"


def _no_cache(model: nn.Module, item: Any) -> Dict[str, Any]:
    """``{"use_cache": False}`` for a model whose config has ``use_cache`` and an item that does not set it."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "use_cache") or (isinstance(item, dict) and "use_cache" in item):
        return {}
    return {"use_cache": False}


def call_model(model: nn.Module, item: Any, index: int) -> Any:
    """``model(item)`` or ``model(**item)`` (with ``use_cache=False``, module doc); a failure
    becomes a ValueError naming the item and its shapes."""
    extra = _no_cache(model, item)
    try:
        return model(**item, **extra) if isinstance(item, dict) else model(item, **extra)
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
        captured.append(BlockInput(tuple(args), _without_cache(kwargs)))
        raise _Captured()

    handle = first.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        _run_each_until_stopped(model, items, must_stop=True)
    finally:
        handle.remove()
    return captured


def _run_each_until_stopped(model: nn.Module, items: Sequence[Any], must_stop: bool) -> None:
    """``model`` on each item until a hook stops it (``_Captured``); with ``must_stop`` an item whose
    forward never reaches the hook is a :class:`NotReached` naming it."""
    for index, item in enumerate(items):
        try:
            call_model(model, item, index)
        except _Captured:
            continue
        if must_stop:
            raise NotReached(f"calibration_data item {index}: the model's forward never reached its first block")


_CACHE_NAMES = ("cache", "past_key_value", "past_key_values", "layer_past")


def _is_cache(value: Any) -> bool:
    """A key / value cache object (transformers' ``Cache`` and its subclasses, by class name)."""
    return any(cls.__name__ == "Cache" or cls.__name__.endswith("Cache") for cls in type(value).__mro__)


def _without_cache(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The block's keyword arguments without a cache object (module doc)."""
    return {k: v for k, v in kwargs.items() if not (k in _CACHE_NAMES or _is_cache(v))}


def _block_hidden(inp: BlockInput) -> torch.Tensor:
    """The hidden states a block received (its first positional argument, or ``hidden_states``)."""
    return inp.args[0] if inp.args else inp.kwargs.get("hidden_states", next(iter(inp.kwargs.values())))


@torch.no_grad()
def replay_is_faithful(model: nn.Module, blocks: nn.ModuleList, item: Any, first: BlockInput) -> bool:
    """Whether replaying ``blocks`` from ``first`` (the first block's inputs on ``item``) gives each
    block's output as the model computes it (float tolerance 1e-5 of its scale)."""
    seen: List[torch.Tensor] = []

    def hook(module: nn.Module, args: tuple, output: Any) -> None:
        seen.append(_hidden(output))

    handles = [b.register_forward_hook(hook) for b in blocks]
    last = blocks[len(blocks) - 1].register_forward_hook(_stop)
    try:
        try:
            call_model(model, item, 0)
        except _Captured:
            pass
    finally:
        for h in handles + [last]:
            h.remove()
    if len(seen) != len(blocks):
        return False
    inputs = [first]
    for index, block in enumerate(blocks):
        inputs = run_block(model, block, inputs)
        got, want = _block_hidden(inputs[0]), seen[index]
        if got.shape != want.shape:
            return False
        scale = float(want.abs().max()) or 1.0
        if not float((got.double() - want.double()).abs().max()) <= 1e-5 * scale:
            return False
    return True


def _stop(module: nn.Module, args: tuple, output: Any) -> None:
    raise _Captured()


@torch.no_grad()
def run_model_until(model: nn.Module, block: nn.Module, items: Sequence[Any]) -> None:
    """Run ``model`` on each item, stopping once ``block`` has run (what a block's calibration feed
    does where a replay is not faithful)."""
    handle = block.register_forward_hook(_stop)
    try:
        _run_each_until_stopped(model, items, must_stop=False)
    finally:
        handle.remove()


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
