"""correct_upstream(): error correction from the already quantized upstream layers, block by block.

The quantized ``model`` (converted, calibrated or not) and its ``float_model`` run side by side on
the calibration data, one block at a time (:mod:`.blocks`): each block of the float model takes
the float model's hidden states, each block of the quantized model the quantized model's, so a
layer's input carries the error of every quantized layer before it. For each quantized linear of a
block the paired input moments (:mod:`.paired_moments`) are accumulated item by item, then
:func:`.float_target.correct_layer` fits the layer to the float layer's output on the float inputs
and rounds by GPTQ (kept only where it beats round to nearest and the layer's current weight on
that objective). The corrected block's outputs feed the next block.

Measured on tiny models only (``tests/calib/test_upstream_correction.py``); not one of ``ptq``'s
methods, nor a default, until it is measured on a real model.
"""
from __future__ import annotations

from typing import Any, List

import torch
from torch import nn

from .blocks import capture_block_inputs, check_calibration_data, find_blocks, run_block
from .float_target import correct_layer
from .paired_moments import PairedAccumulator
from .ptq import _quant_linears
from .report import LayerReport

__all__ = ["correct_upstream"]


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
