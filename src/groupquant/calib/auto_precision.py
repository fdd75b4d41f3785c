"""auto_precision: choose a recipe per linear layer under an average bits-per-weight budget.

1. Sensitivity: each selected ``nn.Linear`` of the float model, on the calibration data, is run
   with each candidate's weight and input quantizers alone (every other layer float, the layer's
   inputs those of the float model): sensitivity = the summed squared output error over the
   calibration tokens, ``sum ||x W^T - q_in(x) q_w(W)^T||^2``. (Errors of the layers of a residual
   network add up in the residual stream, so sums of these are a proxy for the model's error.)
2. Assignment: the choice of one candidate per layer with the least total sensitivity whose
   storage ``sum(bits(layer, candidate))`` is at most ``budget_bits * (weights of the layers)``: a
   multiple-choice knapsack solved exactly by dynamic programming over the integer bit costs
   (divided by their gcd; when that leaves more than :data:`MAX_STATES` states the costs are
   rounded up to a coarser unit, which keeps every answer within the budget).
3. Conversion: each layer is converted with its recipe (linear layers only: function-mode
   quantization of attention GEMMs is not applied), optionally followed by ``methods``
   (``scale_search`` / ``gptq``) run block by block as in :func:`groupquant.ptq`.

Bits of a layer under a candidate: elements ``O * I * element_bits`` plus one scale per group
(``scale_bits``) plus 32 for a per-tensor scale; ``"float"`` costs the weight dtype's bits.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from ..nn import quantize_model
from ..nn.convert import unconvertible_weight_layers
from ..nn.name_patterns import as_patterns, matches_any
from ..nn.output_head import announce_kept_heads, check_quantize_head, head_kept_float, output_heads
from ..nn.recipes import recipe as recipe_of
from ..quantizers.resolve import quantizer_spec
from .blocks import call_model, check_calibration_data
from .methods import LAYER_METHODS, resolve_methods
from .ptq import _progress, calibrate

__all__ = ["auto_precision", "assign", "layer_bits", "MAX_STATES"]

#: Largest dynamic-programming table (cost states) before the bit costs are coarsened.
MAX_STATES = 2_000_000
FLOAT = "float"


def layer_bits(candidate: Any, out_features: int, in_features: int, dtype: torch.dtype = torch.float32) -> int:
    """Storage bits of an ``[out, in]`` weight under ``candidate`` (a recipe, its name, or ``"float"``)."""
    if candidate == FLOAT:
        return out_features * in_features * torch.finfo(dtype).bits
    r = recipe_of(candidate)
    if r.weight_quant is None:
        return out_features * in_features * torch.finfo(dtype).bits
    spec = quantizer_spec(r.weight_quant)
    bits = out_features * in_features * spec.fmt.bit_width
    if spec.granularity == "group":
        size = spec.group_size or in_features
        bits += out_features * -(-in_features // size) * spec.scale_format.bit_width
    elif spec.granularity == "channel":
        bits += out_features * 32
    else:
        bits += 32
    return bits + (32 if spec.tensor_scale else 0)


def assign(costs: Sequence[Sequence[int]], sensitivity: Sequence[Sequence[float]],
           capacity: int) -> Tuple[List[int], bool]:
    """The candidate index per layer minimising ``sum(sensitivity[l][c])`` subject to
    ``sum(costs[l][c]) <= capacity`` (integers), and whether the answer is exact (False when the
    costs had to be coarsened, module doc). A ValueError when even the cheapest choice does not fit."""
    cheapest = sum(min(row) for row in costs)
    if cheapest > capacity:
        raise ValueError(f"budget of {capacity} bits is below the cheapest assignment ({cheapest} bits)")
    unit = 0
    for row in costs:
        for c in row:
            unit = math.gcd(unit, int(c))
    unit = max(unit, 1)
    exact = capacity // unit <= MAX_STATES
    if not exact:
        unit = -(-capacity // MAX_STATES)
    cost = [[-(-int(c) // unit) for c in row] for row in costs]
    cap = capacity // unit
    if sum(min(row) for row in cost) > cap:  # coarsening made it infeasible: fall back to the cheapest choice
        return [int(np.argmin(row)) for row in costs], False
    dp = np.full(cap + 1, np.inf)
    dp[0] = 0.0
    choice = np.zeros((len(cost), cap + 1), dtype=np.int16)
    for layer, (row, sens) in enumerate(zip(cost, sensitivity)):
        new = np.full(cap + 1, np.inf)
        for index, (k, s) in enumerate(zip(row, sens)):
            if k > cap:
                continue
            cand = np.full(cap + 1, np.inf)
            cand[k:] = dp[: cap + 1 - k] + float(s)
            better = cand < new
            new[better] = cand[better]
            choice[layer, better] = index
        dp = new
    at = int(np.argmin(dp))
    out = [0] * len(cost)
    for layer in range(len(cost) - 1, -1, -1):
        out[layer] = int(choice[layer, at])
        at -= cost[layer][out[layer]]
    return out, exact


def _candidate_layer(linear: nn.Linear, candidate: Any) -> Optional[nn.Module]:
    """A quant layer computing ``linear`` under ``candidate`` (sharing its parameters), or None for float."""
    if candidate == FLOAT:
        return None
    holder = nn.Sequential(linear)
    converted = quantize_model(holder, recipe=candidate, functional=False)[0]
    holder[0] = linear  # leave no trace of the temporary holder
    return converted.eval()


@torch.no_grad()
def _sensitivities(model: nn.Module, items: List[Any], layers: Dict[str, nn.Linear],
                   candidates: Sequence[Any], progress: bool) -> Dict[str, List[float]]:
    quant = {name: [_candidate_layer(layer, c) for c in candidates] for name, layer in layers.items()}
    sens = {name: [0.0] * len(candidates) for name in layers}

    def hook_for(name: str):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            for index, q in enumerate(quant[name]):
                if q is not None:
                    sens[name][index] += float((q(args[0]) - output).double().pow(2).sum())
        return hook

    handles = [layer.register_forward_hook(hook_for(name)) for name, layer in layers.items()]
    bar = _progress(len(items), progress, "sensitivity")
    try:
        for index, item in enumerate(items):
            call_model(model, item, index)
            bar.update()
    finally:
        bar.close()
        for h in handles:
            h.remove()
    return sens


def _table(names: List[str], sizes: List[int], labels: List[str], sens: Dict[str, List[float]],
           chosen: List[int], bits: List[List[int]]) -> str:
    head = ["layer", "weights"] + [f"sens[{c}]" for c in labels] + ["chosen", "bits/weight"]
    rows = [head]
    for name, n, pick, row in zip(names, sizes, chosen, bits):
        rows.append([name, str(n)] + [f"{s:.4g}" for s in sens[name]] + [labels[pick], f"{row[pick] / n:.3f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows)


def auto_precision(model: nn.Module, calibration_data: Any, *, candidates: Sequence[Any], budget_bits: float,
                   exclude: Any = None, methods: Any = (), progress: bool = True,
                   quantize_head: Optional[bool] = None) -> nn.Module:
    """Convert ``model`` (in place) with one candidate recipe per linear layer, the assignment of
    least total sensitivity within ``budget_bits`` average bits per weight (module doc).

    Args:
        candidates: recipe names / :class:`groupquant.nn.Recipe` objects, and ``"float"`` to allow
            leaving a layer unquantized (a single name is one candidate).
        budget_bits: average storage bits per weight over the selected layers (scales included);
            ``math.inf``: no limit (each layer takes its least sensitive candidate).
        exclude: module-name patterns (fnmatch) left in float and outside the budget (e.g. ``"lm_head"``).
        methods: layer calibration methods run after the conversion (``"gptq"``, ``"scale_search"``).
        progress: progress bars, and print the per-layer table.
        quantize_head: as :func:`groupquant.quantize_model`: a language model's output head (tied to
            an embedding, or ``get_output_embeddings()``) is left float and outside the budget unless
            True; None says so in one line.

    Returns the model with ``model.precision_assignment`` (layer name -> candidate name) and
    ``model.precision_table`` (the printed table).
    """
    items = check_calibration_data(calibration_data)
    candidates = [candidates] if isinstance(candidates, str) else list(candidates)  # one name, not its letters
    if not candidates:
        raise ValueError("auto_precision: candidates is empty; give recipe names such as ['mxfp4', 'mxfp8']")
    labels = [c if c == FLOAT else recipe_of(c).name for c in candidates]
    if isinstance(budget_bits, bool) or not isinstance(budget_bits, (int, float)) or not budget_bits > 0:
        raise ValueError(f"auto_precision: budget_bits must be a positive number of bits per weight (or math.inf: no "
                         f"limit), got {budget_bits!r}")
    layer_methods = resolve_methods(list(methods) if not isinstance(methods, (str, dict)) else methods, None)
    if any(name not in LAYER_METHODS for name in layer_methods):
        raise ValueError(f"auto_precision: methods may only be {', '.join(LAYER_METHODS)}, got {list(layer_methods)}")
    check_quantize_head(quantize_head, "auto_precision")
    patterns = as_patterns(exclude, "exclude")
    layers = {name: m for name, m in model.named_modules() if type(m) is nn.Linear and not matches_any(name, patterns)}
    heads = output_heads(model)
    kept = {name: note for name, m in layers.items()
            if (note := head_kept_float(m, [name], heads, None, quantize_head)) is not None}
    layers = {name: m for name, m in layers.items() if name not in kept}
    if quantize_head is None:
        announce_kept_heads(list(kept.values()), "auto_precision")
    if not layers:
        other = ", ".join(f"{name} x {n}" for name, n in unconvertible_weight_layers(model).items())
        also = f"; its other weight layers ({other}) are not converted" if other else ""
        raise ValueError(f"auto_precision: {type(model).__name__} has no nn.Linear layer left to assign (after exclude "
                         f"and the output head){also}")
    names = list(layers)
    sizes = [layers[n].weight.numel() for n in names]
    bits = [[layer_bits(c, *layers[n].weight.shape, layers[n].weight.dtype) for c in candidates] for n in names]
    # budget_bits=inf: no limit, i.e. room for the dearest candidate of every layer
    capacity = sum(max(b) for b in bits) if math.isinf(budget_bits) else int(math.floor(budget_bits * sum(sizes)))
    smallest = min((sum(b[i] for b in bits) / sum(sizes), labels[i]) for i in range(len(candidates)))
    if sum(min(b) for b in bits) > capacity:
        raise ValueError(f"auto_precision: budget_bits={budget_bits} is below the smallest candidate "
                         f"({smallest[1]!r}: {sum(min(b) for b in bits) / sum(sizes):.4f} bits per weight)")
    was_training = model.training
    model.eval()
    sens = _sensitivities(model, items, layers, candidates, progress)
    chosen, exact = assign(bits, [sens[n] for n in names], capacity)
    table = _table(names, sizes, labels, sens, chosen, bits)
    used = sum(b[c] for b, c in zip(bits, chosen)) / sum(sizes)
    table += f"\naverage {used:.4f} bits per weight (budget {budget_bits}){'' if exact else ' (approximate costs)'}"
    for index, c in enumerate(candidates):
        picked = [n for n, k in zip(names, chosen) if k == index]
        if picked and c != FLOAT:
            quantize_model(model, recipe=c, include=picked, functional=False)
    if layer_methods:
        calibrate(model, items, layer_methods, progress)
    model.train(was_training)
    model.precision_assignment = {n: labels[k] for n, k in zip(names, chosen)}
    model.precision_table = table
    if progress:
        print(table)
    return model
