"""ptq(): convert a model like quantize_model and calibrate it, block by block.

Steps: (1) :func:`groupquant.quantize_model` with the recipe (``exclude`` and ``quantize_head`` as
there: a language model's output head stays float unless ``quantize_head=True``); (2) model-level methods (``smooth``,
``rotate``) on the converted model; (3) block by block (:mod:`groupquant.calib.blocks`): the
block's quant linear layers accumulate their input second moments ``H`` on the calibration data
(inputs computed by the already-calibrated earlier blocks), each layer runs ``scale_search`` then
``gptq`` (:func:`groupquant.calib.methods.calibrate_layer`), and the calibrated block's outputs
become the next block's inputs.

The reports (:class:`~groupquant.calib.report.LayerReport`, one per layer and method) are kept on
the model as ``model.calibration_report`` (a list, the model-level methods' first) and printed as
a table when ``progress`` is on.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch import nn

from ..nn import quantize_model
from ..nn.output_head import check_quantize_head
from ..nn.recipes import recipe as recipe_of
from .blocks import capture_block_inputs, call_model, check_calibration_data, find_blocks, run_block
from .hessian import HessianAccumulator
from .methods import LAYER_METHODS, MODEL_METHODS, calibrate_layer, model_method, resolve_methods
from .report import LayerReport, format_reports

__all__ = ["ptq", "calibrate"]


def _progress(total: int, enabled: bool, desc: str) -> Any:
    """A tqdm bar (when installed and ``enabled``), else a stand-in with ``update`` / ``close``."""
    if enabled:
        try:
            from tqdm.auto import tqdm
            return tqdm(total=total, desc=desc)
        except ImportError:
            pass

    class _Silent:
        def update(self, n: int = 1) -> None:
            pass

        def close(self) -> None:
            pass

    return _Silent()


def _quant_linears(module: nn.Module, prefix: str) -> Dict[str, nn.Module]:
    """The quant linear layers (a ``weight_quant`` proxy and a 2-D weight) under ``module``, by full name."""
    out = {}
    for name, child in module.named_modules():
        if hasattr(child, "weight_quant") and getattr(child, "weight", None) is not None and child.weight.dim() == 2:
            out[f"{prefix}.{name}" if prefix and name else (prefix or name)] = child
    return out


def _shared_weights(model: nn.Module) -> Dict[int, List[str]]:
    """``id(weight) -> names of the modules holding it``, for weights held by more than one module
    (a head tied to the embedding)."""
    holders: Dict[int, List[str]] = {}
    for name, m in model.named_modules():
        weight = m._parameters.get("weight")
        if weight is not None:
            holders.setdefault(id(weight), []).append(name)
    return {k: v for k, v in holders.items() if len(v) > 1}


def _calibrate_unit(model: nn.Module, unit: nn.Module, prefix: str, feed: Any,
                    layer_methods: Dict[str, Dict[str, Any]], shared: Dict[int, List[str]]) -> List[LayerReport]:
    """Accumulate H for the quant linears of ``unit`` with ``feed()``, then calibrate each; a layer
    whose weight another module holds too (``shared``) is left round to nearest: rewriting it would
    change that module (the embedding of a tied head)."""
    layers = _quant_linears(unit, prefix)
    skipped = {}
    for name, layer in list(layers.items()):
        others = [n for n in shared.get(id(layer.weight), []) if n != name]
        if others:
            skipped[name] = f"skipped: weight tied to {', '.join(others)} (calibrating it would change them too)"
            del layers[name]
    accumulators = {name: HessianAccumulator(layer).attach() for name, layer in layers.items()}
    try:
        feed()
    finally:
        for acc in accumulators.values():
            acc.detach()
    reports = [LayerReport(name, "+".join(layer_methods), float("nan"), float("nan"), why)
               for name, why in skipped.items()]
    for name, layer in layers.items():
        acc = accumulators[name]
        if acc.tokens == 0:
            reports.append(LayerReport(name, "+".join(layer_methods), float("nan"), float("nan"),
                                       "skipped: no calibration token reached this layer"))
            continue
        reports.extend(calibrate_layer(name, layer, acc.hessian(), layer_methods))
    return reports


@torch.no_grad()
def calibrate(model: nn.Module, items: List[Any], layer_methods: Dict[str, Dict[str, Any]],
              progress: bool = True) -> List[LayerReport]:
    """Run the layer methods block by block on an already converted model (module doc, step 3)."""
    if not layer_methods:
        return []
    found = find_blocks(model)
    shared = _shared_weights(model)
    if found is None:
        bar = _progress(1, progress, "calibrating")
        reports = _calibrate_unit(model, model, "", lambda: [call_model(model, it, i) for i, it in enumerate(items)],
                                  layer_methods, shared)
        bar.update()
        bar.close()
        return reports
    prefix, blocks = found
    inputs = capture_block_inputs(model, blocks[0], items)
    reports = []
    bar = _progress(len(blocks), progress, "calibrating blocks")
    for index, block in enumerate(blocks):
        reports.extend(_calibrate_unit(model, block, f"{prefix}.{index}",
                                       lambda: run_block(model, block, inputs), layer_methods, shared))
        inputs = run_block(model, block, inputs)
        bar.update()
    bar.close()
    return reports


def ptq(model: nn.Module, calibration_data: Any, *, recipe: Any, methods: Any = None, exclude: Any = None,
        progress: bool = True, seed: int = 0, functional: Optional[bool] = None,
        quantize_head: Optional[bool] = None) -> nn.Module:
    """Convert ``model`` (in place) by ``recipe`` and calibrate it on ``calibration_data``.

    Args:
        calibration_data: an iterable of model inputs, each a tensor (``model(x)``) or a dict of
            keyword arguments (``model(**kw)``), e.g. a few ``[1, 512]`` token-id tensors.
        recipe: a recipe name or :class:`groupquant.nn.Recipe` (as :func:`groupquant.quantize_model`).
        methods: None (the default for the recipe, :data:`groupquant.calib.methods.DEFAULT_METHODS`),
            a name, a list of names, or a dict name -> options (``{"gptq": {"percdamp": 0.05}}``), from
            ``smooth``, ``rotate``, ``scale_search``, ``gptq``; they run in that order.
        exclude: module-name patterns left in float (as quantize_model).
        progress: show a progress bar and print the per-layer report table.
        seed: seeds torch's generator inside the call (the global generator state is restored after).
        functional: as :func:`groupquant.quantize_model`: None (the default) quantizes the functional
            GEMMs (attention's matmuls) by the recipe too; False converts the layers only.
        quantize_head: as :func:`groupquant.quantize_model`: the output head (tied to the embeddings or
            ``get_output_embeddings()``) stays float unless True; None says so in one line. A quantized
            head whose weight is tied to the embedding is quantized round to nearest, never calibrated
            (rewriting the shared weight would change the embeddings too; its report says so).

    Returns the model, with ``model.calibration_report``: the list of
    :class:`~groupquant.calib.report.LayerReport`.
    """
    check_quantize_head(quantize_head, "ptq")
    items = check_calibration_data(calibration_data)
    r = recipe_of(recipe)
    chosen = resolve_methods(methods, r.name)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    was_training = model.training
    model.eval()
    reports: List[LayerReport] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = quantize_model(model, recipe=r, exclude=exclude, functional=functional, quantize_head=quantize_head)
        for name in MODEL_METHODS:
            if name not in chosen:
                continue
            fn = model_method(name)
            if name == "smooth":
                out = fn(model, items, progress=progress, exclude=exclude, **chosen[name])
            else:
                out = fn(model, seed=seed, exclude=exclude, **chosen[name])
            reports.extend(out or [])
        layer_methods = {name: chosen[name] for name in LAYER_METHODS if name in chosen}
        reports.extend(calibrate(model, items, layer_methods, progress))
    model.train(was_training)
    model.calibration_report = reports
    if progress and reports:
        print(format_reports(reports))
    return model
