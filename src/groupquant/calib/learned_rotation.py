"""learn_rotations: the block rotations of ``rotate_model`` learned on calibration data.

``rotate_model`` gives each quantized linear an online block Hadamard rotation of its input
(``x -> x H``, weight ``W H``). Any orthogonal block matrix ``M`` keeps the float function
(``(x M)(W M)^T = x W^T``); the Hadamard one is a good start, not the best for a given layer's
activations and weights. SpinQuant (Liu et al. 2024) learns such rotations on calibration data
through straight-through quantizers; here, matched to ptq's layer-by-layer calibration and a CPU,
each layer's rotation is learned on its own:

- ``M = blockdiag(H_b R_i)``: one orthogonal ``R_i = (I + A_i)^-1 (I - A_i)`` per block of ``b``
  features (the Cayley transform of a skew-symmetric ``A_i = S_i - S_i^T``, ``S_i`` the learned
  parameters, zero at the start, so ``M`` starts at the Hadamard rotation and stays orthogonal
  whatever the step); each block still mixes only its own scale group;
- objective: the layer's mean squared output error against float, ``mean((Q_a(x M) Q_w(W M)^T -
  x W^T)^2)`` on up to ``rows`` input rows per layer captured from one forward pass of the model on
  the calibration data (the quantized model as it stands: inputs carry the upstream quantization,
  as GPTQ's do); both quantizers straight-through (their custom ops' autograd);
- ``steps`` steps of Adam at learning rate ``lr``; the best ``S`` seen (the start included) is kept,
  the rotation is rebuilt from it in float64 and the objective recomputed with the stored matrices:
  a layer whose learned rotation is not strictly better keeps its Hadamard rotation, so the
  objective never gets worse than the fixed rotation's on the calibration rows.

A learned layer's weight becomes ``W H R`` (float64, rounded once) and its online rotation a
:class:`groupquant.nn.layers.input_rotation.LearnedInputRotation` holding ``H_b R_i`` per block (the
state dict keeps it; ONNX export, compressed-tensors and GGUF refuse it). Only layers with a plain
Hadamard ``InputRotation`` are learned (with ``rotate_model(fused_residual=True)`` that is
``down_proj``). The model's float output is checked against the one before on a probe (module
:mod:`.float_check`); a deviation beyond float rounding restores the model and refuses.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

from ..nn.layers.input_rotation import ROTATION_ATTR, InputRotation, LearnedInputRotation
from ..nn.name_patterns import Patterns, matches_any
from ..ops.hadamard import hadamard_matrix
from ..quant_tensor.base import plain
from .blocks import call_model, check_calibration_data
from .float_check import MethodRefused, Snapshot, check_unchanged, float_output
from .layer_rotation import exclude_patterns, quant_linears
from .report import LayerReport

__all__ = ["learn_rotations", "cayley", "layer_objective"]

_UNIT = "mean squared output error vs float on calibration rows"


def _check_options(steps: Any, lr: Any, rows: Any) -> None:
    """TypeError / ValueError naming the option that is not a positive int / finite positive float."""
    for name, value in (("steps", steps), ("rows", rows)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"learn_rotations: {name} must be an int, got {value!r}")
        if value < 1:
            raise ValueError(f"learn_rotations: {name} must be at least 1, got {value}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):
        raise TypeError(f"learn_rotations: lr must be a number, got {lr!r}")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"learn_rotations: lr must be a finite number > 0, got {lr!r}")


def cayley(s: torch.Tensor) -> torch.Tensor:
    """``(I + A)^-1 (I - A)`` with ``A = s - s^T`` per leading index of ``s`` ``[k, b, b]``: orthogonal
    for any ``s`` (identity at ``s = 0``), in ``s``'s dtype."""
    a = s - s.transpose(-1, -2)
    eye = torch.eye(s.shape[-1], dtype=s.dtype, device=s.device).expand_as(a)
    return torch.linalg.solve(eye + a, eye - a)


def _blocks(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``x @ blockdiag(m_0, ..., m_{k-1})`` for ``x`` ``[n, k b]`` and ``m`` ``[k, b, b]``."""
    k, b = m.shape[0], m.shape[1]
    return torch.einsum("nki,kij->nkj", x.reshape(x.shape[0], k, b), m).reshape(x.shape)


def layer_objective(layer: nn.Module, x: torch.Tensor, weight: torch.Tensor, m: torch.Tensor,
                    target: torch.Tensor) -> torch.Tensor:
    """``mean((Q_a(x M) Q_w(W M)^T - target)^2)`` with ``M = blockdiag(m)``, ``x`` the layer's raw
    (unrotated) inputs ``[n, in]`` and ``weight`` ``W`` in the unrotated basis ``[out, in]``;
    differentiable in ``m`` through the layer's quantizers (straight-through)."""
    qx = layer.input_quant.quant_value(_blocks(x, m))
    qw = layer.weight_quant.quant_value(_blocks(weight, m))
    return (qx @ qw.T - target).pow(2).mean()


def _capture(model: nn.Module, layers: Dict[str, nn.Module], items: List[Any], rows: int,
             seed: int) -> Dict[str, torch.Tensor]:
    """Up to ``rows`` input rows (before the online rotation; float32) per layer, the same random
    token positions for every layer, from one forward pass of ``model`` on ``items``."""
    per_item = max(1, math.ceil(rows / len(items)))
    gen = torch.Generator().manual_seed(seed)
    chosen: Dict[Tuple[int, int], torch.Tensor] = {}
    found: Dict[str, List[torch.Tensor]] = {name: [] for name in layers}
    state = {"item": 0}

    def hook(name: str):
        def grab(module: nn.Module, args: tuple) -> None:
            x = getattr(args[0], "value", args[0])
            x = x.detach().reshape(-1, x.shape[-1]).float()
            key = (state["item"], x.shape[0])
            if key not in chosen:
                chosen[key] = torch.randperm(x.shape[0], generator=gen)[:per_item]
            found[name].append(x[chosen[key]])
        return grab

    handles = [layer.register_forward_pre_hook(hook(name)) for name, layer in layers.items()]
    try:
        with torch.no_grad():
            for i, item in enumerate(items):
                state["item"] = i
                call_model(model, item, i)
    finally:
        for h in handles:
            h.remove()
    return {name: torch.cat(xs)[:rows] for name, xs in found.items() if xs}


def _learn_one(layer: nn.Module, x: torch.Tensor, steps: int, lr: float) -> Tuple[float, float, Optional[torch.Tensor]]:
    """Learn one layer's block rotations on inputs ``x``; ``(Hadamard objective, best objective,
    best R [k, b, b] in float64 or None when the start stays best)``."""
    b = layer.input_rotation.block_size
    k = layer.in_features // b
    h = hadamard_matrix(b, device=layer.weight.device).expand(k, b, b)
    w = _blocks(layer.weight.detach().double(), h).float()  # W H H = W: the unrotated weight
    target = x @ w.T
    h32 = h.float()
    s = torch.zeros(k, b, b, device=layer.weight.device, requires_grad=True)
    opt = torch.optim.Adam([s], lr=lr)
    start, best, best_s = None, float("inf"), None
    for step in range(steps + 1):
        loss = layer_objective(layer, x, w, h32 @ cayley(s), target)
        value = float(loss.detach())
        if step == 0:
            start = best = value
        elif value < best:
            best, best_s = value, s.detach().clone()
        if step == steps or not math.isfinite(value):
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    return start, best, None if best_s is None else cayley(best_s.double())


@torch.no_grad()
def _float_output(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``x W^T + b`` in float (the layer's float function; ``x`` unrotated)."""
    b = layer.input_rotation.block_size
    m = getattr(layer.input_rotation, "matrix", None)
    if m is None:
        m = hadamard_matrix(b, device=layer.weight.device).expand(layer.in_features // b, b, b)
    w = _blocks(layer.weight.detach().double(), m.double().transpose(-1, -2))
    y = x.double() @ w.T
    return (y if layer.bias is None else y + layer.bias.detach().double()).float()


@torch.no_grad()
def _deployed_error(layer: nn.Module, x: torch.Tensor, target: torch.Tensor) -> float:
    """``mean((layer(x) - target)^2)``: the layer as it runs (online rotation, quantizers, bias)."""
    return float((plain(layer(x.to(layer.weight.dtype))).float() - target).pow(2).mean())


@torch.no_grad()
def _install(layer: nn.Module, r: torch.Tensor) -> None:
    """``W := W R`` (rotated basis, float64, rounded once) and the online ``H_b R_i`` per block."""
    b = layer.input_rotation.block_size
    layer.weight.copy_(_blocks(layer.weight.detach().double(), r).to(layer.weight.dtype))
    setattr(layer, ROTATION_ATTR, LearnedInputRotation(hadamard_matrix(b, device=r.device) @ r))
    clear = getattr(layer.weight_quant, "clear_cache", None)
    if clear is not None:
        clear()


def _learnable(layer: nn.Module) -> bool:
    return type(getattr(layer, ROTATION_ATTR, None)) is InputRotation


def learn_rotations(model: nn.Module, calibration_data: Any, *, steps: int = 20, lr: float = 2e-3,
                    rows: int = 256, seed: int = 0, exclude: Patterns = None,
                    probe: Any = None) -> List[LayerReport]:
    """Learn each Hadamard-rotated layer's block rotations on ``calibration_data`` (module doc). In place.

    Args:
        model: a converted model already rotated by ``rotate_model`` (layers with an online
            ``InputRotation``); MethodRefused when none has one.
        calibration_data: model inputs (tensors or dicts of keyword arguments), as ``ptq``'s.
        steps: optimisation steps per layer (int >= 1).
        lr: Adam's learning rate on the Cayley parameters (> 0).
        rows: calibration input rows per layer the objective is computed on (int >= 1).
        seed: which token positions are sampled.
        exclude: module names / fnmatch patterns of layers to leave with their Hadamard rotation.
        probe: the float-function check's input (default: the first calibration item).

    Returns one :class:`LayerReport` per rotated layer: the objective with the Hadamard rotation
    (``error_before``) and with the rotation kept (``error_after``).
    """
    _check_options(steps, lr, rows)
    items = check_calibration_data(calibration_data)
    all_names = [n for n, _ in model.named_modules() if n]
    patterns = exclude_patterns(exclude, all_names)
    layers = {n: m for n, m in quant_linears(model) if _learnable(m) and not matches_any(n, patterns)}
    if not layers:
        raise MethodRefused(f"learn_rotations on {type(model).__name__}: no quant linear layer has an online Hadamard "
                            "rotation to start from; run rotate_model first (ptq: methods [..., 'rotate', "
                            "'learn_rotations', ...])")
    probe = items[0] if probe is None else probe
    before = float_output(model, probe)
    snapshot = Snapshot(model)
    inputs = _capture(model, layers, items, rows, seed)
    reports = []
    for name, layer in layers.items():
        x = inputs.get(name)
        if x is None or x.shape[0] == 0:
            reports.append(LayerReport(name, "learn_rotations", float("nan"), float("nan"),
                                       "skipped: no calibration token reached this layer"))
            continue
        with torch.enable_grad():
            _, _, r = _learn_one(layer, x, steps, lr)
        target = _float_output(layer, x)
        hadamard = _deployed_error(layer, x, target)
        detail = f"kept the Hadamard rotation (not better in {steps} steps)"
        after = hadamard
        if r is not None:
            w_before, rot_before = layer.weight.detach().clone(), getattr(layer, ROTATION_ATTR)
            _install(layer, r)
            after = _deployed_error(layer, x, target)
            if after < hadamard:
                detail = f"learned block rotation b={rot_before.block_size} ({steps} steps, lr={lr:g})"
            else:  # the stored (float32) rotation lost what the optimisation found: keep the Hadamard one
                with torch.no_grad():
                    layer.weight.copy_(w_before)
                setattr(layer, ROTATION_ATTR, rot_before)
                layer.weight_quant.clear_cache()
                after = hadamard
        reports.append(LayerReport(name, "learn_rotations", hadamard, after, f"{detail}; errors: {_UNIT}"))
    check_unchanged(model, probe, before, snapshot, "learn_rotations")
    return reports
