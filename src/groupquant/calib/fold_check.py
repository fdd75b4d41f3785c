"""Checks by behaviour that a fold group (:class:`.graph.FoldGroup`, found by module names) folds
exactly: on a probe input, in float, each reader of a norm receives exactly the norm's output,
and the norm's output scales per feature with its weight (and bias); for the fused residual
rotation also that the norm, its weight set to one, commutes with an orthogonal rotation (RMSNorm
does; a LayerNorm's mean subtraction does not)."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch
from torch import nn

from .float_check import float_mode, float_output
from .graph import FoldGroup
from .hadamard import ResidualRotation

__all__ = ["check_groups", "commutes_with_rotation"]


def _first(store: Dict[int, Any], key: int, value: Any) -> None:
    if key not in store:
        store[key] = value


def _plain(x: Any) -> torch.Tensor:
    return getattr(x, "value", x).detach()


@torch.no_grad()
def _scales_with_weight(norm: nn.Module, x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether ``norm``'s output on ``x`` becomes ``out / s`` when its weight (and bias) are divided
    by a per-feature ``s`` (the fold ``smooth`` makes); the norm's parameters are put back."""
    w = norm.weight
    s = torch.linspace(0.5, 2.0, w.shape[-1], dtype=torch.float64, device=w.device)
    saved = [(p, p.detach().clone()) for p in (w, getattr(norm, "bias", None)) if isinstance(p, torch.Tensor)]
    try:
        for p, value in saved:
            p.copy_((value.double() / s).to(p.dtype))
        got = norm(x).double() * s.to(x.device)  # x may sit on another device than the norm's weight
    finally:
        for p, value in saved:
            p.copy_(value)
    ref = out.double()
    return bool(float((got - ref).abs().max()) <= 1e-4 * (float(ref.abs().max()) or 1.0))


def check_groups(model: nn.Module, groups: List[FoldGroup], probe: Any
                 ) -> Tuple[List[FoldGroup], Dict[int, str], torch.Tensor]:
    """The groups that fold exactly on ``probe`` (module doc), why each other one does not (by index
    into ``groups``), and the model's float output on ``probe``."""
    outputs: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}
    inputs: Dict[int, torch.Tensor] = {}
    handles = []
    for g in groups:
        if g.kind != "norm":
            continue
        src = g.source[1]
        handles.append(src.register_forward_hook(
            lambda m, a, o: _first(outputs, id(m), (_plain(a[0]), _plain(o)))))
        for _, t in g.targets:
            handles.append(t.register_forward_pre_hook(lambda m, a: _first(inputs, id(m), _plain(a[0]))))
    try:
        before = float_output(model, probe)
    finally:
        for h in handles:
            h.remove()
    ok: List[FoldGroup] = []
    why: Dict[int, str] = {}
    for index, g in enumerate(groups):
        name, src = g.source
        if g.kind == "norm":
            if id(src) not in outputs:
                why[index] = f"{name} did not run on the probe input"
                continue
            x, out = outputs[id(src)]
            readers = [n for n, t in g.targets if id(t) not in inputs or inputs[id(t)].shape != out.shape
                       or not torch.equal(inputs[id(t)], out)]
            if readers:
                why[index] = f"{', '.join(readers)} do(es) not read {name}'s output"
                continue
            with float_mode(model):
                scales = _scales_with_weight(src, x, out)
            if not scales:
                why[index] = (f"{name} ({type(src).__name__})'s output does not scale with its weight"
                              f"{' and bias' if getattr(src, 'bias', None) is not None else ''} (as x * (1 + w) "
                              "does): a scale folded into it would not cancel")
                continue
        ok.append(g)
    return ok, why, before


@torch.no_grad()
def commutes_with_rotation(norm: nn.Module, x: torch.Tensor, block_size: int) -> bool:
    """Whether ``norm`` with its weight set to one gives ``norm(x Q) = norm(x) Q`` for a block
    rotation ``Q`` with random signs (its weight is put back)."""
    w = norm.weight
    saved = w.detach().clone()
    gen = torch.Generator().manual_seed(0)
    signs = (torch.randint(0, 2, (w.shape[-1],), generator=gen) * 2 - 1).double()
    rot = ResidualRotation(signs, block_size).to(x.device)
    try:
        w.fill_(1.0)
        a, b = norm(rot(x)).double(), rot(norm(x)).double()
    finally:
        w.copy_(saved)
    return bool(float((a - b).abs().max()) <= 1e-4 * (float(b.abs().max()) or 1.0))
