"""ptq(): convert a model like quantize_model and calibrate it, block by block.

Steps: (0) the calibration items and the model-level methods are checked on the float model: non-
finite data, a model with nothing to convert, and a model-level method the user named that does not
apply (:mod:`groupquant.calib.fold_check`) are refused before anything changes; a default one that
does not apply is skipped and reported (layer :data:`MODEL_ROW`); (1)
:func:`groupquant.quantize_model` with the recipe (``exclude`` and ``quantize_head`` as there: a
language model's output head stays float unless ``quantize_head=True``); (2) model-level methods
(``smooth``, ``rotate``) on the converted model, each checked against the float function
(:mod:`groupquant.calib.float_check`); (3) stack by stack, block by block
(:mod:`groupquant.calib.blocks`): the block's quant linear layers accumulate their input second
moments ``H`` on the calibration data (inputs computed by the already-calibrated earlier blocks),
each layer runs ``scale_search`` then ``gptq`` (:func:`groupquant.calib.methods.calibrate_layer`),
and the calibrated block's outputs become the next block's inputs (with ``gptq``'s ``asymmetric``
option, :mod:`groupquant.calib.asymmetric` feeds a block's layers group by group against a float
pass instead); then the quant linear layers outside every stack, on the whole model's forward
(plain GPTQ there).

The reports (:class:`~groupquant.calib.report.LayerReport`, one per layer and method) are kept on
the model as ``model.calibration_report`` (a list, the model-level methods' first) and printed as
a table when ``progress`` is on.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import torch
from torch import nn

from ..nn import quantize_model
from ..nn.convert import REPLACEMENTS, nothing_converted, remove_functional
from ..nn.layers.quant_layer import QuantLayerMixin
from ..nn.output_head import check_quantize_head
from ..nn.layers.quant_layers import iter_quant_layers
from ..nn.recipes import recipe as recipe_of
from .blocks import (NotReached, call_model, capture_block_inputs, check_calibration_data, find_stacks,
                     replay_is_faithful, run_block, run_model_until)
from .asymmetric import PairedSums, asymmetric_block
from .float_check import MethodRefused, float_mode
from .fold_check import check_groups
from .graph import fold_groups
from .hessian import HessianAccumulator, SharedInputs
from .residual import fused_refusal
from .smooth import smooth_refusal
from .methods import LAYER_METHODS, MODEL_METHODS, calibrate_layer, model_method, resolve_methods
from .report import LayerReport, format_reports

__all__ = ["ptq", "calibrate", "MODEL_ROW"]

#: The ``layer`` of a report about the whole model (a model-level method skipped).
MODEL_ROW = "(model)"


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
    """The quant layers with a 2-D weight (linear ones) under ``module`` (named ``prefix``), by full name."""
    return {name: m for name, m in iter_quant_layers(module, prefix=prefix)
            if getattr(m, "weight", None) is not None and m.weight.dim() == 2}


def _shared_weights(model: nn.Module) -> Dict[int, List[str]]:
    """``id(weight) -> names of the modules holding it``, for weights held by more than one module
    (a head tied to the embedding)."""
    holders: Dict[int, List[str]] = {}
    for name, m in model.named_modules():
        weight = m._parameters.get("weight")
        if weight is not None:
            holders.setdefault(id(weight), []).append(name)
    return {k: v for k, v in holders.items() if len(v) > 1}


def _calibrate_layers(layers: Dict[str, nn.Module], accumulators: Dict[str, Any],
                      layer_methods: Dict[str, Dict[str, Any]]) -> List[LayerReport]:
    """Calibrate each of ``layers`` from its accumulator (a :class:`HessianAccumulator`, or the
    :class:`PairedSums` of asymmetric GPTQ); a layer no calibration token reached is reported skipped."""
    for name, acc in accumulators.items():
        acc.check_finite(name)
    reports: List[LayerReport] = []
    for name, layer in layers.items():
        acc = accumulators[name]
        if acc.tokens == 0:
            reports.append(LayerReport(name, "+".join(layer_methods), float("nan"), float("nan"),
                                       "skipped: no calibration token reached this layer"))
            continue
        moments = acc.moments() if isinstance(acc, PairedSums) else None
        reports.extend(calibrate_layer(name, layer, acc.hessian(), layer_methods, moments=moments))
    return reports


def _hessian_run(feed: Callable[[], Any], layer_methods: Dict[str, Dict[str, Any]]) -> Callable[..., List[LayerReport]]:
    """Accumulate ``H`` for the given layers over ``feed()`` (q / k / v, gate / up reading one tensor
    share its product: :class:`SharedInputs`), then calibrate them."""
    def run(layers: Dict[str, nn.Module]) -> List[LayerReport]:
        shared_inputs = SharedInputs()
        accumulators = {name: HessianAccumulator(layer, shared_inputs).attach() for name, layer in layers.items()}
        try:
            feed()
        finally:
            for acc in accumulators.values():
                acc.detach()
        return _calibrate_layers(layers, accumulators, layer_methods)
    return run


def _calibrate_unit(unit: nn.Module, prefix: str, run: Callable[[Dict[str, nn.Module]], List[LayerReport]],
                    layer_methods: Dict[str, Dict[str, Any]], shared: Dict[int, List[str]],
                    only: Optional[Dict[str, nn.Module]] = None) -> List[LayerReport]:
    """Calibrate the quant linears of ``unit`` (or ``only`` those) with ``run`` (:func:`_hessian_run`,
    or asymmetric GPTQ's :func:`.asymmetric.asymmetric_block`); a layer whose weight another module
    holds too (``shared``) is left round to nearest: rewriting it would change that module (the
    embedding of a tied head)."""
    layers = dict(only) if only is not None else _quant_linears(unit, prefix)
    skipped = {}
    for name, layer in list(layers.items()):
        others = [n for n in shared.get(id(layer.weight), []) if n != name]
        if others:
            skipped[name] = f"skipped: weight tied to {', '.join(others)} (calibrating it would change them too)"
            del layers[name]
    reports = [LayerReport(name, "+".join(layer_methods), float("nan"), float("nan"), why)
               for name, why in skipped.items()]
    return reports + run(layers)


def _calibrate_stack(model: nn.Module, prefix: str, blocks: nn.ModuleList, items: List[Any],
                     layer_methods: Dict[str, Dict[str, Any]], shared: Dict[int, List[str]],
                     bar: Any) -> List[LayerReport]:
    """Calibrate one stack block by block: each block fed by replaying the blocks before it where
    that reproduces the model (:func:`replay_is_faithful`), else by running the model up to it."""
    try:
        inputs = capture_block_inputs(model, blocks[0], items)
    except NotReached:  # a list of blocks the forward does not use
        bar.update(len(blocks))
        return [LayerReport(name, "+".join(layer_methods), float("nan"), float("nan"),
                            f"skipped: the model's forward on the calibration data never runs {prefix}")
                for name in _quant_linears(blocks, prefix)]
    faithful = replay_is_faithful(model, blocks, items[0], inputs[0])
    asymmetric = bool(layer_methods.get("gptq", {}).get("asymmetric", False))
    if asymmetric:
        if not faithful:
            raise ValueError(f"gptq asymmetric=True: replaying the blocks of {prefix} does not reproduce the model, and "
                             "the float pass of asymmetric GPTQ needs that replay; use asymmetric=False")
        with float_mode(model):
            floated = capture_block_inputs(model, blocks[0], items)
    reports: List[LayerReport] = []
    for index, block in enumerate(blocks):
        name = f"{prefix}.{index}"
        if asymmetric:
            def run(layers: Dict[str, nn.Module], block: nn.Module = block) -> List[LayerReport]:
                nonlocal floated
                done, floated = asymmetric_block(model, block, layers, inputs, floated,
                                                 lambda group, sums: _calibrate_layers(group, sums, layer_methods))
                return done
            reports.extend(_calibrate_unit(block, name, run, layer_methods, shared))
        elif faithful:
            feed = lambda: run_block(model, block, inputs)  # noqa: E731
            reports.extend(_calibrate_unit(block, name, _hessian_run(feed, layer_methods), layer_methods, shared))
        else:
            feed = lambda: run_model_until(model, block, items)  # noqa: E731
            reports.extend(_calibrate_unit(block, name, _hessian_run(feed, layer_methods), layer_methods, shared))
        if faithful and index + 1 < len(blocks):
            inputs = run_block(model, block, inputs)
        bar.update()
    return reports


@torch.no_grad()
def calibrate(model: nn.Module, items: List[Any], layer_methods: Dict[str, Dict[str, Any]],
              progress: bool = True) -> List[LayerReport]:
    """Run the layer methods on an already converted model (module doc, step 3): stack by stack
    (T5: the encoder's, then the decoder's), block by block, then the quant linears outside every
    stack (an output head) on the whole model's forward."""
    if not layer_methods:
        return []
    items = check_calibration_data(items)
    stacks = find_stacks(model)
    shared = _shared_weights(model)
    feed_all = lambda: [call_model(model, it, i) for i, it in enumerate(items)]  # noqa: E731
    if not stacks:
        bar = _progress(1, progress, "calibrating")
        reports = _calibrate_unit(model, "", _hessian_run(feed_all, layer_methods), layer_methods, shared)
        bar.update()
        bar.close()
        return reports
    reports = []
    bar = _progress(sum(len(blocks) for _, blocks in stacks), progress, "calibrating blocks")
    try:
        for prefix, blocks in stacks:
            reports.extend(_calibrate_stack(model, prefix, blocks, items, layer_methods, shared, bar))
    finally:
        bar.close()
    inside = {id(m) for _, blocks in stacks for m in blocks.modules()}
    outside = {name: m for name, m in _quant_linears(model, "").items() if id(m) not in inside}
    if outside:
        reports.extend(_calibrate_unit(model, "", _hessian_run(feed_all, layer_methods), layer_methods, shared, only=outside))
    return reports


def ptq(model: nn.Module, calibration_data: Any, *, recipe: Any, methods: Any = None, exclude: Any = None,
        progress: bool = True, seed: int = 0, functional: Optional[bool] = None,
        quantize_head: Optional[bool] = None) -> nn.Module:
    """Convert ``model`` (in place) by ``recipe`` and calibrate it on ``calibration_data``.

    Args:
        calibration_data: an iterable of model inputs, each a tensor (``model(x)``) or a dict of
            keyword arguments (``model(**kw)``), e.g. a few ``[1, 512]`` token-id tensors.
        recipe: a recipe name or :class:`groupquant.nn.Recipe` (as :func:`groupquant.quantize_model`).
        methods: None (the default for the recipe, :data:`groupquant.calib.methods.DEFAULT_METHODS`;
            a default model-level method that does not apply to the model is skipped and reported),
            a name, a list of names, or a dict name -> options (``{"gptq": {"percdamp": 0.05}}``), from
            ``smooth``, ``rotate``, ``learn_rotations``, ``scale_search`` (or NVFP4's
            ``two_level_search``), ``gptq``; they run in that order. A named
            model-level method that cannot apply is refused
            (:class:`~groupquant.calib.float_check.MethodRefused`) before the model changes.
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
    if not any(type(m) in REPLACEMENTS for m in model.modules()):
        raise ValueError(nothing_converted(model, 0, "ptq"))
    was_training = model.training
    model.eval()
    reports: List[LayerReport] = []
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _convert_and_calibrate(model, items, r=r, chosen=chosen, reports=reports, named=methods is not None,
                                           exclude=exclude, functional=functional, quantize_head=quantize_head,
                                           progress=progress, seed=seed)
    finally:
        model.train(was_training)
    model.calibration_report = reports
    if progress and reports:
        print(format_reports(reports))
    return model


def _convert_and_calibrate(model: nn.Module, items: List[Any], *, r: Any, chosen: Dict[str, Dict[str, Any]],
                           reports: List[LayerReport], named: bool, **options: Any) -> nn.Module:
    """ptq's steps 0-3 (module doc), appending to ``reports``; the converted model."""
    reports.extend(_plan_model_methods(model, items, chosen, named=named))
    model = quantize_model(model, recipe=r, exclude=options["exclude"], functional=options["functional"],
                           quantize_head=options["quantize_head"])
    if not any(isinstance(m, QuantLayerMixin) for m in model.modules()):
        remove_functional(model)  # (all quantize_model did): the model is left as it came
        model.__dict__.pop("_groupquant_recipe", None)
        raise ValueError(nothing_converted(model, sum(type(m) in REPLACEMENTS for m in model.modules()), "ptq"))
    for name in MODEL_METHODS:
        if name in chosen:
            reports.extend(_run_model_method(model, name, chosen[name], items, options["progress"], options["seed"],
                                             options["exclude"], named=named))
    layer_methods = {name: chosen[name] for name in LAYER_METHODS if name in chosen}
    reports.extend(calibrate(model, items, layer_methods, options["progress"]))
    return model


def _model_method_refusal(model: nn.Module, name: str, options: Dict[str, Any], probe: Any) -> str:
    """Why the model-level method ``name`` would not apply to the float ``model`` (empty: it would)."""
    if name == "smooth":
        why = smooth_refusal(model)
        if why:
            return why
        exact, refused, _ = check_groups(model, fold_groups(model), probe)
        return "" if exact else "no pair folds exactly: " + "; ".join(sorted(set(refused.values())))
    if name == "rotate" and options.get("fused_residual"):
        return fused_refusal(model, probe)
    return ""


def _plan_model_methods(model: nn.Module, items: List[Any], chosen: Dict[str, Dict[str, Any]],
                        named: bool) -> List[LayerReport]:
    """Before anything changes: each chosen model-level method checked on the float model. One the
    user named that does not apply is refused (:class:`MethodRefused`); a default one is taken out
    of ``chosen`` (in place) with a report saying why."""
    reports: List[LayerReport] = []
    for name in [n for n in MODEL_METHODS if n in chosen]:
        why = _model_method_refusal(model, name, chosen[name], items[0])
        if not why:
            continue
        if named:
            raise MethodRefused(f"ptq(methods=[... {name!r} ...]) does not apply to {type(model).__name__}: {why}. "
                                f"Leave {name!r} out of methods (nothing was changed)")
        del chosen[name]
        reports.append(LayerReport(MODEL_ROW, name, float("nan"), float("nan"),
                                   f"skipped (a default that does not apply to {type(model).__name__}): {why}"))
    return reports


def _run_model_method(model: nn.Module, name: str, options: Dict[str, Any], items: List[Any], progress: bool,
                      seed: int, exclude: Any, named: bool) -> List[LayerReport]:
    """Run ``smooth`` / ``rotate`` / ``learn_rotations`` on the converted model; a default one that refuses after all (its
    float check restored the model) is reported as skipped."""
    fn = model_method(name)
    try:
        if name == "smooth":
            return list(fn(model, items, progress=progress, exclude=exclude, **options) or [])
        if name == "learn_rotations":
            return list(fn(model, items, seed=seed, exclude=exclude, probe=items[0], **options) or [])
        return list(fn(model, seed=seed, exclude=exclude, probe=items[0], **options) or [])
    except MethodRefused as err:
        if named:
            raise
        return [LayerReport(MODEL_ROW, name, float("nan"), float("nan"), f"skipped (a default): {err}")]
