"""auto_precision: choose a format per linear layer under an average bits-per-weight budget and,
optionally, an average bits-per-activation budget.

Candidates are recipes, ``"float"``, or ``(weights, activations)`` pairs taking the weight
quantizer of one recipe and the input quantizer of another (``("mxfp4", "mxfp8")``: W4A8), so a
layer may keep 4-bit weights and move only its activations
(:mod:`groupquant.calib.precision_candidates`).

1. Sensitivity: each selected ``nn.Linear`` of the float model, on the calibration data, is run
   with each candidate's weight and input quantizers alone (every other layer float, the layer's
   inputs those of the float model): sensitivity = the summed squared output error over the
   calibration tokens, ``sum ||x W^T - q_in(x) q_w(W)^T||^2``. (Errors of the layers of a residual
   network add up in the residual stream, so sums of these are a proxy for the model's error.)
2. Assignment: the choice of one candidate per layer with the least total sensitivity whose
   storage ``sum(bits(layer, candidate))`` is at most ``budget_bits * (weights of the layers)``: a
   multiple-choice knapsack solved exactly by dynamic programming over the integer bit costs
   (:func:`groupquant.calib.knapsack.assign`). With ``activation_budget_bits`` the activation bits
   ``sum(tokens(layer) * row_bits(layer, candidate))`` must also be at most
   ``activation_budget_bits * sum(tokens(layer) * in_features(layer))``: a two-constraint
   multiple-choice knapsack, a dynamic programme over both integer costs
   (:func:`groupquant.calib.knapsack.assign_two`). Either is exact unless its table would exceed
   :data:`MAX_STATES` states, when the costs are rounded up to a coarser unit (every answer still
   within the budgets).
3. Conversion: each layer is converted with its recipe (linear layers only: function-mode
   quantization of attention GEMMs is not applied), optionally followed by ``methods``: the
   model-level ones (``smooth``, ``rotate``, ``learn_rotations``) on the mixed model, then the
   layer ones (``scale_search`` / ``gptq``) block by block, each as :func:`groupquant.ptq` runs it
   (a model-level method that does not apply to the float model is refused before anything
   changes). The sensitivities of step 1 are those of the float model's layers, without the
   smoothing or rotation: the assignment does not know what they will win back per layer.

Activation elements are weighted by the tokens each layer saw on the calibration data, so the
budget is the average over the input elements the layers really quantize: in a decoder where every
linear layer sees every token this is the in_features weighting; where layers see different token
counts (a mixture of experts' experts, an encoder and a decoder on texts of different lengths) a
layer's activations cost in proportion to the traffic they make.

Bits of a layer under a candidate: elements ``O * I * element_bits`` plus one scale per group
(``scale_bits``) plus 32 for a per-tensor scale; ``"float"`` costs the weight dtype's bits.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from ..nn import quantize_model
from ..nn.convert import unconvertible_weight_layers
from ..nn.name_patterns import as_patterns, matches_any
from ..nn.output_head import announce_kept_heads, check_quantize_head, head_kept_float, output_heads
from .blocks import call_model, check_calibration_data
from .methods import LAYER_METHODS, MODEL_METHODS, resolve_methods
from .knapsack import MAX_STATES, assign, assign_two
from .precision_candidates import FLOAT, activation_bits, layer_bits, resolve_candidate
from .ptq import _plan_model_methods, _progress, _run_model_method, calibrate

__all__ = ["auto_precision", "assign", "assign_two", "layer_bits", "activation_bits", "MAX_STATES"]


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
                   candidates: Sequence[Any], progress: bool) -> Tuple[Dict[str, List[float]], Dict[str, int]]:
    """Each layer's summed squared output error per candidate (module doc, step 1), and the number of
    input rows (tokens) each layer saw on the calibration data."""
    quant = {name: [_candidate_layer(layer, c) for c in candidates] for name, layer in layers.items()}
    sens = {name: [0.0] * len(candidates) for name in layers}
    tokens = {name: 0 for name in layers}

    def hook_for(name: str):
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            tokens[name] += args[0].numel() // args[0].shape[-1]
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
    return sens, tokens


def _table(names: List[str], sizes: List[int], labels: List[str], sens: Dict[str, List[float]],
           chosen: List[int], bits: List[List[int]], act: Optional[Tuple[List[int], List[List[int]]]]) -> str:
    """The per-layer table: sensitivities, the choice, its bits per weight (and per activation
    element when ``act`` = (input elements per layer, activation bits per layer and candidate))."""
    head = ["layer", "weights"] + [f"sens[{c}]" for c in labels] + ["chosen", "bits/weight"]
    head += ["bits/act"] if act is not None else []
    rows = [head]
    for index, (name, n, pick, row) in enumerate(zip(names, sizes, chosen, bits)):
        cells = [name, str(n)] + [f"{s:.4g}" for s in sens[name]] + [labels[pick], f"{row[pick] / n:.3f}"]
        if act is not None:
            elements, costs = act
            cells.append(f"{costs[index][pick] / elements[index]:.3f}" if elements[index] else "-")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows)


def _check_budget(value: Any, setting: str, unit: str, optional: bool) -> None:
    """A ValueError naming ``setting`` unless ``value`` is a positive number (or math.inf; or None
    when ``optional``)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        none = ", or None: no activation budget" if optional else ""
        raise ValueError(f"auto_precision: {setting} must be a positive number of bits per {unit} (or math.inf: no "
                         f"limit{none}), got {value!r}")


def _resolve_candidates(candidates: Any) -> Tuple[List[str], List[Any]]:
    """Labels and candidates (``"float"`` or a Recipe), one per candidate as given (a single name or
    pair is one candidate)."""
    if isinstance(candidates, str):  # one name, not its letters (a pair alone goes in a list: a tuple is a list)
        candidates = [candidates]
    candidates = list(candidates)
    if not candidates:
        raise ValueError("auto_precision: candidates is empty; give recipe names such as ['mxfp4', 'mxfp8'] or "
                         "(weights, activations) pairs such as [('mxfp4', 'mxfp4'), ('mxfp4', 'mxfp8')]")
    resolved = [resolve_candidate(c, f"auto_precision: candidates[{i}]") for i, c in enumerate(candidates)]
    labels = [label for label, _ in resolved]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"auto_precision: candidates name {', '.join(map(repr, repeated))} more than once")
    return labels, [c for _, c in resolved]


def _capacity(budget: float, costs: List[List[int]], elements: int) -> int:
    """Integer capacity of ``budget`` bits per element over ``elements`` (inf: the dearest choices)."""
    return sum(max(row) for row in costs) if math.isinf(budget) else int(math.floor(budget * elements))


def _smallest(costs: List[List[int]], elements: int, labels: List[str]) -> Tuple[float, str]:
    """The uniform candidate of least average bits per element: ``(bits, label)``."""
    return min((sum(row[i] for row in costs) / max(elements, 1), labels[i]) for i in range(len(labels)))


def auto_precision(model: nn.Module, calibration_data: Any, *, candidates: Sequence[Any], budget_bits: float,
                   activation_budget_bits: Optional[float] = None, exclude: Any = None, methods: Any = (),
                   progress: bool = True, quantize_head: Optional[bool] = None, seed: int = 0) -> nn.Module:
    """Convert ``model`` (in place) with one candidate per linear layer, the assignment of least
    total sensitivity within ``budget_bits`` average bits per weight and, when given,
    ``activation_budget_bits`` average bits per activation element (module doc).

    Args:
        candidates: recipe names / :class:`groupquant.nn.Recipe` objects, ``"float"`` to allow
            leaving a layer unquantized, and ``(weights, activations)`` pairs of those: the weight
            quantizer of the first, the input quantizer of the second (``("mxfp4", "mxfp8")``: W4A8;
            :mod:`groupquant.calib.precision_candidates`). A single name or pair is one candidate.
        budget_bits: average storage bits per weight over the selected layers (scales included);
            ``math.inf``: no limit (each layer takes its least sensitive candidate).
        activation_budget_bits: average bits per input element of the selected layers (scales
            included; float inputs cost their dtype's bits), each layer weighted by the input
            elements it saw on the calibration data (tokens x in_features); None (default): no
            activation budget, the weight budget alone as before; ``math.inf``: no limit.
        exclude: module-name patterns (fnmatch) left in float and outside the budget (e.g. ``"lm_head"``).
        methods: calibration methods run after the conversion, as :func:`groupquant.ptq`'s
            ``methods`` (names, or a dict name -> options): ``smooth`` / ``rotate`` /
            ``learn_rotations`` on the mixed model, then ``scale_search`` (or ``two_level_search``) /
            ``gptq`` per layer. Default: none (round to nearest).
        progress: progress bars, and print the per-layer table.
        quantize_head: as :func:`groupquant.quantize_model`: a language model's output head (tied to
            an embedding, or ``get_output_embeddings()``) is left float and outside the budget unless
            True; None says so in one line.
        seed: seeds torch's generator for the model-level methods (as :func:`groupquant.ptq`).

    Returns the model with ``model.precision_assignment`` (layer name -> candidate label: the recipe
    name, ``"float"``, or ``"w=<weights>,a=<activations>"`` for a pair), ``model.precision_sensitivity``
    (layer name -> candidate label -> sensitivity), ``model.precision_table`` (the printed table) and,
    when ``methods`` ran, ``model.calibration_report`` (as :func:`groupquant.ptq`'s).
    """
    items = check_calibration_data(calibration_data)
    labels, candidates = _resolve_candidates(candidates)
    _check_budget(budget_bits, "budget_bits", "weight", optional=False)
    _check_budget(activation_budget_bits, "activation_budget_bits", "activation element", optional=True)
    chosen_methods = resolve_methods(list(methods) if not isinstance(methods, (str, dict)) else methods, None)
    layer_methods = {name: opts for name, opts in chosen_methods.items() if name in LAYER_METHODS}
    model_methods = {name: opts for name, opts in chosen_methods.items() if name in MODEL_METHODS}
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"auto_precision: seed must be an int, got {seed!r}")
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
    capacity = _capacity(budget_bits, bits, sum(sizes))
    smallest = _smallest(bits, sum(sizes), labels)
    if sum(min(b) for b in bits) > capacity:
        raise ValueError(f"auto_precision: budget_bits={budget_bits} is below the smallest candidate "
                         f"({smallest[1]!r}: {sum(min(b) for b in bits) / sum(sizes):.4f} bits per weight)")
    was_training = model.training
    model.eval()
    try:
        if model_methods:  # one that does not apply is refused here, before the model changes
            _plan_model_methods(model, items, dict(model_methods), named=True)
        sens, tokens = _sensitivities(model, items, layers, candidates, progress)
        act = None
        if activation_budget_bits is None:
            chosen, exact = assign(bits, [sens[n] for n in names], capacity)
        else:
            act = _activation_costs(layers, names, tokens, candidates, labels, activation_budget_bits)
            act_capacity = _capacity(activation_budget_bits, act[1], sum(act[0]))
            try:
                chosen, exact = assign_two(bits, act[1], [sens[n] for n in names], capacity, act_capacity)
            except ValueError as err:
                raise ValueError(f"auto_precision: budget_bits={budget_bits} with activation_budget_bits="
                                 f"{activation_budget_bits}: {err}") from None
    except BaseException:
        model.train(was_training)
        raise
    table = _table(names, sizes, labels, sens, chosen, bits, act)
    used = sum(b[c] for b, c in zip(bits, chosen)) / sum(sizes)
    table += f"\naverage {used:.4f} bits per weight (budget {budget_bits})"
    if act is not None:
        used_act = sum(row[c] for row, c in zip(act[1], chosen)) / max(sum(act[0]), 1)
        table += f", {used_act:.4f} bits per activation element (budget {activation_budget_bits})"
    table += "" if exact else " (approximate costs)"
    for index, c in enumerate(candidates):
        picked = [n for n, k in zip(names, chosen) if k == index]
        if picked and c != FLOAT:
            quantize_model(model, recipe=c, include=picked, functional=False)
    reports = []
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for name, opts in model_methods.items():
                reports += _run_model_method(model, name, opts, items, progress, seed, exclude, named=True)
        if layer_methods:
            reports += calibrate(model, items, layer_methods, progress)
    finally:
        model.train(was_training)
    if chosen_methods:
        model.calibration_report = reports
    model.precision_assignment = {n: labels[k] for n, k in zip(names, chosen)}
    model.precision_sensitivity = {n: dict(zip(labels, sens[n])) for n in names}
    model.precision_table = table
    if progress:
        print(table)
    return model


def _activation_costs(layers: Dict[str, nn.Linear], names: List[str], tokens: Dict[str, int],
                      candidates: List[Any], labels: List[str], budget: float) -> Tuple[List[int], List[List[int]]]:
    """Input elements per layer (tokens x in_features) and the activation bits per layer and candidate
    (tokens x bits of one input row); a ValueError when even the cheapest choices exceed ``budget``."""
    elements = [tokens[n] * layers[n].in_features for n in names]
    costs = [[tokens[n] * activation_bits(c, layers[n].in_features, layers[n].weight.dtype) for c in candidates]
             for n in names]
    if not math.isinf(budget) and sum(min(row) for row in costs) > math.floor(budget * sum(elements)):
        bits, label = _smallest(costs, sum(elements), labels)
        cheapest = sum(min(row) for row in costs) / max(sum(elements), 1)
        raise ValueError(f"auto_precision: activation_budget_bits={budget} is below the cheapest activations "
                         f"({cheapest:.4f} bits per activation element; smallest candidate {label!r}: {bits:.4f})")
    return elements, costs
