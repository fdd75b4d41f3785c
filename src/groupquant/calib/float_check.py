"""Behaviour checks for the model-level methods: a converted model's float function on a probe
input, a snapshot to undo a method, and the check that a method left the float function alone.

``smooth`` and ``rotate(fused_residual=True)`` rewrite weights on assumptions about the model's
architecture (which norm feeds which linear, what a norm computes). Rather than trusting names,
each method computes the model's output on a probe input with every quantizer switched off
(:func:`float_output`), rewrites, computes it again and compares (:func:`check_unchanged`); a
model whose function moved by more than float rounding is restored (:class:`Snapshot`) and the
method refused with an error naming the model and the deviation.

Float rounding, the rule: ``max |after - before| <= rtol * max |before|`` with ``rtol`` 1e-3
for float32 / float64 outputs and 3e-2 for 16-bit ones (the rewrites round each weight once in
its dtype; a wrong fold moves the output by whole percents).
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

from ..nn.layers.inside import in_quant_layer
from ..proxy.base import QuantProxy

__all__ = ["MethodRefused", "Snapshot", "float_mode", "float_output", "first_tensor", "check_unchanged",
           "token_probe", "relative_deviation"]


class MethodRefused(ValueError):
    """A model-level method does not apply to this model (raised before the model changes, or after
    it was restored)."""


def first_tensor(output: Any) -> Optional[torch.Tensor]:
    """The first floating tensor of a model output (a tensor, a tuple / list, a dict or ModelOutput)."""
    if isinstance(output, torch.Tensor):
        return output if output.is_floating_point() else None
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    for value in values:
        found = first_tensor(value)
        if found is not None:
            return found
    return None


def _proxies(model: nn.Module) -> List[QuantProxy]:
    """Every quant proxy of the model, those of its functional mode's quantizers included."""
    found = [m for m in model.modules() if isinstance(m, QuantProxy)]
    mode = model.__dict__.get("_groupquant_functional")
    if mode is not None:
        found += [m for m in mode.quantizers.modules() if isinstance(m, QuantProxy)]
    return found


@contextlib.contextmanager
def float_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Inside: every quantizer of ``model`` off (quant layers compute in float, online rotations
    kept) and the functional mode passing every call through; restored on exit."""
    saved: List[Tuple[QuantProxy, nn.Module]] = []
    for proxy in _proxies(model):
        quant = proxy._modules.get("tensor_quant")
        if quant is not None:
            saved.append((proxy, quant))
            proxy._modules["tensor_quant"] = None
    try:
        with in_quant_layer():
            yield model
    finally:
        for proxy, quant in saved:
            proxy._modules["tensor_quant"] = quant


@torch.no_grad()
def float_output(model: nn.Module, probe: Any) -> torch.Tensor:
    """The model's output (first floating tensor) on ``probe`` (a tensor or a dict of keyword
    arguments) in float (:func:`float_mode`), as float64."""
    from .blocks import call_model  # (blocks imports nothing from here)
    with float_mode(model):
        out = first_tensor(call_model(model, probe, 0))
    if out is None:
        raise ValueError(f"{type(model).__name__}: the model's output on the probe input holds no floating tensor "
                         "to compare")
    return out.detach().double().clone()


def relative_deviation(before: torch.Tensor, after: torch.Tensor) -> float:
    """``max |after - before| / max |before|`` (inf for a non-finite or reshaped output)."""
    if before.shape != after.shape or not torch.isfinite(after).all():
        return float("inf")
    scale = float(before.abs().max()) or 1.0
    return float((after - before).abs().max()) / scale


def _rtol(dtype: torch.dtype) -> float:
    return 3e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-3


def token_probe(model: nn.Module, tokens: int = 8, seed: int = 0) -> Optional[torch.Tensor]:
    """Token ids ``[1, tokens]`` for a model with input embeddings (None otherwise)."""
    get = getattr(model, "get_input_embeddings", None)
    embed = get() if callable(get) else None
    if not isinstance(embed, nn.Embedding):
        return None
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, embed.num_embeddings, (1, tokens), generator=gen).to(embed.weight.device)


class Snapshot:
    """The values of every parameter and buffer of a model and each module's children, to put a
    model back as it was after a method that rewrote it in place (identity of the parameters kept)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.tensors: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}
        for t in list(model.parameters()) + list(model.buffers()):
            self.tensors.setdefault(id(t), (t, t.detach().clone()))
        self.children = [(m, dict(m._modules)) for m in model.modules()]

    @torch.no_grad()
    def restore(self) -> None:
        for m, children in self.children:
            m._modules.clear()
            m._modules.update(children)
        for t, value in self.tensors.values():
            t.data.copy_(value)
        for m in self.model.modules():
            clear = getattr(m, "clear_cache", None)
            if callable(clear) and isinstance(m, QuantProxy):
                clear()


def check_unchanged(model: nn.Module, probe: Any, before: torch.Tensor, snapshot: Snapshot, what: str) -> float:
    """The model's float output on ``probe`` against ``before``; beyond float rounding (module doc)
    the model is restored from ``snapshot`` and :class:`MethodRefused` names ``what`` and the
    model. Returns the relative deviation."""
    if not bool(torch.isfinite(before).all()):
        snapshot.restore()
        raise MethodRefused(f"{what} on {type(model).__name__}: the model's float output on the probe input holds "
                            "NaN / Inf, so whether the method keeps its function cannot be checked; the model was "
                            "left as it was")
    after = float_output(model, probe)
    deviation = relative_deviation(before, after)
    param = next(model.parameters(), None)
    rtol = _rtol(param.dtype if param is not None else torch.float32)
    if not deviation <= rtol:
        snapshot.restore()
        raise MethodRefused(f"{what} would change the float function of this {type(model).__name__} (output moved "
                            f"by {deviation:.3g} of its largest value on a probe input, more than float rounding "
                            f"{rtol:g}): "
                            "its architecture is not one the method folds exactly; the model was left as it was")
    return deviation
