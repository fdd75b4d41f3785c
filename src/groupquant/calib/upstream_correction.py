"""correct_upstream(): error correction from the already quantized upstream layers, block by block.

The quantized ``model`` (converted, calibrated or not) and its ``float_model`` run side by side on
the calibration data, one block at a time (:mod:`.blocks`): each block of the float model takes
the float model's hidden states, each block of the quantized model the quantized model's, so a
layer's input carries the error of every quantized layer before it. For each quantized linear of a
block the paired input moments (:mod:`.paired_moments`) are accumulated item by item, then
:func:`.float_target.correct_layer` fits the layer to the float layer's output on the float inputs
and rounds by GPTQ (kept only where it beats round to nearest and the layer's current weight on
that objective). The corrected block's outputs feed the next block.

Refused (ValueError) on a model whose layers were rotated or smoothed (``ptq``'s ``rotate``,
``learn_rotations``, ``smooth``): its weights then act on inputs in another basis or scale than the
float model's, so round to nearest of the float weight and the ridge toward it mean nothing.

Measured on SmolLM2-135M (docs/calibration-upstream.md): with 4 x 512 calibration tokens it makes
the model far worse (MXFP4 W + A, round to nearest then this: 452x float perplexity, round to
nearest alone 4.2x) although every layer's own objective falls: the objective is measured on the
calibration tokens the fit was made on, and 2k tokens are too few for fits of 576 to 1536 inputs
(an early layer's inputs are functions of the token alone: a few hundred distinct rows). Not one of
``ptq``'s methods, nor a default.
"""
from __future__ import annotations

from typing import Any, List

import torch
from torch import nn

from ..nn.layers.input_rotation import ROTATION_ATTR
from ..nn.layers.quant_layers import iter_quant_layers
from .blocks import capture_block_inputs, check_calibration_data, find_blocks, run_block
from .float_target import correct_layer
from .paired_moments import PairedAccumulator
from .ptq import _quant_linears
from .report import LayerReport

__all__ = ["correct_upstream"]


#: ``ptq`` methods after which a layer's weight no longer acts on the float model's inputs
_BASIS_METHODS = ("rotate", "learn_rotations", "smooth")


def _check_same_basis(model: nn.Module) -> None:
    """ValueError when ``model``'s layers carry an online input rotation or its calibration report
    says they were smoothed or rotated (module doc)."""
    rotated = [name for name, m in iter_quant_layers(model) if getattr(m, ROTATION_ATTR, None) is not None]
    changed = sorted({r.method for r in getattr(model, "calibration_report", None) or ()
                      if r.method in _BASIS_METHODS and not r.detail.startswith("not ")})
    if rotated or changed:
        what = f"layer {rotated[0]} carries an online input rotation" if rotated else f"ptq ran {', '.join(changed)}"
        raise ValueError(f"correct_upstream: {what}, so the quantized layers no longer act on the float model's "
                         "inputs; convert the float model without smooth / rotate / learn_rotations (e.g. "
                         "ptq(..., methods=['scale_search', 'gptq'])) before correcting it")


def _blocks(model: nn.Module, which: str) -> Any:
    found = find_blocks(model)
    if found is None:
        raise ValueError(f"correct_upstream: the {which} model has no repeated blocks (an nn.ModuleList of "
                         "same-typed layers such as Llama's model.layers)")
    return found


@torch.no_grad()
def correct_upstream(model: nn.Module, float_model: nn.Module, calibration_data: Any, *, ridge: float = 1.0, percdamp: float = 0.01,
                     act_order: bool = True, batch_size: int = 128) -> List[LayerReport]:
    """Correct the quantized linears of ``model``'s blocks against ``float_model`` (module doc), in
    place; one :class:`LayerReport` per layer (``error_before``: round to nearest of the float
    weight, ``error_after``: what the layer keeps, both the mean squared output error per output
    against the float layer on the float model's inputs). ``ridge``: how strongly the fit is held
    toward the float weight (:func:`.float_target.float_target_weight`; measured on a tiny Llama, 1.0
    generalised best of 0.01, 0.1, 1.0); ``percdamp``, ``act_order``, ``batch_size``: GPTQ's."""
    items = check_calibration_data(calibration_data)
    _check_same_basis(model)
    prefix, blocks = _blocks(model, "quantized")
    _, float_blocks = _blocks(float_model, "float")
    if len(blocks) != len(float_blocks):
        raise ValueError(f"correct_upstream: the quantized model has {len(blocks)} blocks and the float model "
                         f"{len(float_blocks)}; give the float model the quantized one was made from")
    q_inputs = capture_block_inputs(model, blocks[0], items)
    f_inputs = capture_block_inputs(float_model, float_blocks[0], items)
    reports: List[LayerReport] = []
    for index, (block, float_block) in enumerate(zip(blocks, float_blocks)):
        layers = _quant_linears(block, "")
        pairs = {name: PairedAccumulator(layer, float_block.get_submodule(name)).attach()
                 for name, layer in layers.items()}
        try:
            for q_in, f_in in zip(q_inputs, f_inputs):
                run_block(float_model, float_block, [f_in])
                run_block(model, block, [q_in])
                for acc in pairs.values():
                    acc.pair()
        finally:
            for acc in pairs.values():
                acc.detach()
        for name, layer in layers.items():
            full = f"{prefix}.{index}.{name}"
            if pairs[name].tokens == 0:
                reports.append(LayerReport(full, "float_target", float("nan"), float("nan"),
                                           "skipped: no calibration token reached this layer"))
                continue
            reports += correct_layer(full, layer, float_block.get_submodule(name).weight, pairs[name].moments(),
                                     ridge=ridge, percdamp=percdamp, act_order=act_order, batch_size=batch_size)
        q_inputs = run_block(model, block, q_inputs)
        f_inputs = run_block(float_model, float_block, f_inputs)
    return reports
