"""rotate_model: Hadamard rotations of quantized linears' inputs, matched to the quantizer's block.

For ``y = x W^T`` and an orthogonal ``H``, ``(x H)(W H)^T = x W^T``: rotating the weight offline
(``W' = W H``) and the activation online (``x' = x H``, inside the layer, before its input
quantizer) changes nothing in float and spreads an outlier over its block before the block's
scale is taken. ``H = blockdiag(H_b)`` with ``b`` the quantizer's group size, so each rotated
block is exactly one scale group (a full-width rotation would mix groups and fight MXFP4's
power-of-two scales: MR-GPTQ, Egiazarian et al. 2025; QuaRot, Ashkboos et al. 2024, for the
rotations themselves). The online rotation is :class:`groupquant.nn.layers.input_rotation.InputRotation`
(a fast Walsh-Hadamard transform), which ``state_dict``, ``pack_model`` and ONNX export keep.

``fused_residual=True`` (Llama family, see :mod:`.residual`) rotates the residual stream offline
instead, so only ``down_proj`` keeps an online rotation. It is refused before anything changes
where the model's norms would not fold exactly (checked by behaviour on a token probe:
:func:`.residual.fused_refusal`; Gemma's ``x * (1 + w)`` norms, a LayerNorm, fused q/k/v).
Either way, a model with input embeddings is checked after rotating: its float output on a probe
of token ids must be the one before within float rounding, or the model is restored and the
method refused (:mod:`.float_check`).
"""
from __future__ import annotations

from typing import Any, Dict, List

from torch import nn

from ..nn.layers.input_rotation import ROTATION_ATTR
from ..nn.name_patterns import Patterns, matches_any
from .layer_rotation import (exclude_patterns, quant_linears, rotate_layer, rotation_block_size,
                             weight_quant_mse)
from .float_check import MethodRefused, Snapshot, check_unchanged, float_output, token_probe
from .residual import fused_refusal, rotate_residual
from .report import LayerReport

__all__ = ["rotate_model"]

def _tied_weights(model: nn.Module) -> Dict[int, List[str]]:
    """``id(parameter) -> the names of the modules holding it`` for parameters held by several modules."""
    holders: Dict[int, List[str]] = {}
    for name, m in model.named_modules(remove_duplicate=False):
        for p in m.parameters(recurse=False):
            holders.setdefault(id(p), []).append(name)
    return {k: v for k, v in holders.items() if len(set(v)) > 1}


def _default_probe(model: nn.Module) -> Any:
    """Token ids the model takes (:func:`token_probe`), or None (no embeddings, or the model wants
    more than ``input_ids``: an encoder-decoder)."""
    probe = token_probe(model)
    if probe is None:
        return None
    try:
        float_output(model, probe)
    except ValueError:
        return None
    return probe


def rotate_model(model: nn.Module, *, fused_residual: bool = False, seed: int = 0,
                 exclude: Patterns = None, probe: Any = None) -> List[LayerReport]:
    """Rotate the input of each quantized linear by a block Hadamard matched to its quantizer's
    group size (weight offline, activation online inside the layer; exact in float). In place.

    Args:
        model: an already converted model (``quantize_model`` / ``ptq``: QuantLinear layers).
        fused_residual: for Llama-family models from ``transformers``, fold the RMSNorm weights into
            the linears that read them and rotate the residual stream offline (embeddings,
            q/k/v/gate/up inputs, o/down outputs, head; ``v -> o`` folded per head), so only
            ``down_proj`` keeps an online rotation; tied embeddings / head stay tied (the final norm
            then runs between two fast transforms, :class:`.rotated_norm.RotatedNorm`). BERT-family
            and other models: ValueError with the reason.
        seed: the random signs of the residual rotation (``fused_residual``); the per-layer
            rotations are deterministic.
        exclude: module names / fnmatch patterns of linears to leave unrotated (with
            ``fused_residual`` their weights still take the residual rotation that keeps the
            model exact).
        probe: a model input (a tensor, or a dict of keyword arguments) for the float-function
            check (module doc); None: random token ids for a model with input embeddings (no
            check for a model without them).

    Returns one :class:`LayerReport` per linear: ``error_before`` / ``error_after`` = mean squared
    error of its weight quantizer on its weight before / after (in the rotated basis, which an
    orthogonal rotation makes comparable); layers left alone say why in ``detail``.
    """
    if not isinstance(fused_residual, bool):
        raise TypeError(f"rotate_model: fused_residual must be True or False, got {fused_residual!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"rotate_model: seed must be an int, got {seed!r}")
    layers = quant_linears(model)
    if not layers:
        raise ValueError("rotate_model: the model has no QuantLinear layer; convert it first "
                         "(groupquant.quantize_model(model, recipe=...))")
    patterns = exclude_patterns(exclude, [n for n, _ in model.named_modules() if n])
    excluded = {n for n, _ in layers if matches_any(n, patterns)}
    before = {n: weight_quant_mse(m) for n, m in layers}
    probe = probe if probe is not None else _default_probe(model)
    if fused_residual:
        if probe is None:
            raise MethodRefused(f"rotate_model(fused_residual=True) on {type(model).__name__}: the model has no input "
                                "embedding (get_input_embeddings()) to rotate")
        why = fused_refusal(model, probe)
        if why:
            raise MethodRefused(f"rotate_model(fused_residual=True) on {type(model).__name__}: {why}")
    float_before = float_output(model, probe) if probe is not None else None
    snapshot = Snapshot(model)
    handled: Dict[str, str] = {}
    if fused_residual:
        try:
            handled = rotate_residual(model, seed=seed, excluded=excluded)
        except ValueError:
            snapshot.restore()
            raise
    tied = _tied_weights(model)
    reports = []
    for name, layer in layers:
        if name in handled:
            detail = handled[name]
        elif name in excluded:
            detail = "excluded: not rotated"
        elif getattr(layer, ROTATION_ATTR, None) is not None:
            detail = "already has an input rotation: left as it is"
        elif id(layer.weight) in tied:
            detail = f"weight tied with {', '.join(sorted(set(tied[id(layer.weight)]) - {name}))}: not rotated"
        else:
            b, why = rotation_block_size(layer)
            if b is None:
                detail = f"not rotated: {why}"
            else:
                rotate_layer(layer, b)
                detail = f"block Hadamard b={b}, online input rotation"
        reports.append(LayerReport(name, "rotate", before[name], weight_quant_mse(layer),
                                   detail + "; errors: weight quantization MSE"))
    if float_before is not None:
        what = f"rotate_model(fused_residual={fused_residual})"
        check_unchanged(model, probe, float_before, snapshot, what)
    return reports
