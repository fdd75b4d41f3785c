"""The calibration methods by name, their fixed order, the default per recipe, and the per-layer
step that runs ``scale_search`` / ``gptq`` on one linear layer.

Order (whatever order the user lists them in): ``smooth``, ``rotate`` then ``learn_rotations``
(model-level transforms of the converted model; ``learn_rotations`` needs ``rotate``), then, block by
block and layer by layer, ``scale_search`` (or its NVFP4 form ``two_level_search``,
:mod:`groupquant.calib.two_level_search`) then ``gptq``. ``smooth`` / ``rotate`` / ``learn_rotations``
live in :mod:`groupquant.calib.smooth` / :mod:`groupquant.calib.rotate` /
:mod:`groupquant.calib.learned_rotation` (:func:`model_method`).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import nn

from .float_target import PairedMoments, float_target_weight, target_error
from .gptq import gptq_quantize
from .hessian import output_error
from .report import LayerReport
from .scale_search import search_grid
from .two_level_search import two_level_layer_grid
from .weight_grid import grid_unsupported, layer_fake_quant, rule_grid, settle

__all__ = ["ORDER", "MODEL_METHODS", "LAYER_METHODS", "DEFAULT_METHODS", "resolve_methods", "model_method",
           "calibrate_layer"]

MODEL_METHODS = ("smooth", "rotate", "learn_rotations")
LAYER_METHODS = ("scale_search", "two_level_search", "gptq")
#: Every method, in the order they run.
ORDER = MODEL_METHODS + LAYER_METHODS

#: Options each method takes (``methods={"gptq": {"percdamp": 0.1}}``).
OPTIONS: Dict[str, Tuple[str, ...]] = {
    "gptq": ("percdamp", "batch_size", "act_order", "asymmetric"),
    "scale_search": ("below", "above"),
    "two_level_search": ("tensor_factors", "four_over_six", "pins"),
    "rotate": ("fused_residual",),
    "smooth": ("alpha",),
    "learn_rotations": ("steps", "lr", "rows"),
}

#: ``methods=None``: the default per recipe name (by measurement on SmolLM2-135M and MiniLM, see
#: docs/calibration.md): W + A MX recipes smooth and rotate (block Hadamard) before scale search and
#: GPTQ; NVFP4 and weight-only recipes skip the rotation (it hurt them alone: NVFP4's UE4M3 block
#: scales already fit each block, and weights gain less from it than activations). Recipes not listed
#: get ``_FALLBACK``.
_FALLBACK: Tuple[str, ...] = ("scale_search", "gptq")
_WA_MX: Tuple[str, ...] = ("smooth", "rotate", "scale_search", "gptq")
_NO_ROTATION: Tuple[str, ...] = ("smooth", "scale_search", "gptq")
DEFAULT_METHODS: Dict[str, Tuple[str, ...]] = {
    **{name: _WA_MX for name in ("mxfp8", "mxfp8_e4m3_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxint8", "mxfp4",
                                 "mxfp4_fwd_mxfp8_bwd")},
    **{name: _NO_ROTATION for name in ("nvfp4", "nvfp4_weight_only", "mxfp4_weight_only", "mxfp8_weight_only")},
}


def resolve_methods(methods: Any, recipe_name: Optional[str]) -> Dict[str, Dict[str, Any]]:
    """``methods`` (None, a name, a list of names, or a dict name -> options) as an ordered dict
    name -> options, in :data:`ORDER`. Unknown names and options are ValueErrors naming them."""
    if methods is None:
        methods = DEFAULT_METHODS.get(recipe_name or "", _FALLBACK)
    if isinstance(methods, str):
        methods = [methods]
    if isinstance(methods, Mapping):
        given = {name: dict(opts or {}) for name, opts in methods.items()}
    else:
        try:
            given = {name: {} for name in methods}
        except TypeError:
            raise TypeError(f"methods must be None, a method name, a list of names or a dict name -> options, "
                            f"got {methods!r}") from None
    for name, opts in given.items():
        if name not in ORDER:
            raise ValueError(f"methods: unknown calibration method {name!r}; methods: {', '.join(ORDER)}")
        for key in opts:
            if key not in OPTIONS[name]:
                raise ValueError(f"methods: {name!r} has no option {key!r}; options: {', '.join(OPTIONS[name])}")
    asymmetric = given.get("gptq", {}).get("asymmetric", False)
    if not isinstance(asymmetric, bool):
        raise ValueError(f"methods: gptq asymmetric must be True or False, got {asymmetric!r}")
    if "scale_search" in given and "two_level_search" in given:
        raise ValueError("methods: 'two_level_search' replaces 'scale_search' (it searches the block scales too); "
                         "name one of them")
    if "learn_rotations" in given and "rotate" not in given:
        raise ValueError("methods: 'learn_rotations' learns the block rotations 'rotate' puts in; list 'rotate' "
                         "too (e.g. methods=['smooth', 'rotate', 'learn_rotations', 'scale_search', 'gptq'])")
    return {name: given[name] for name in ORDER if name in given}


def model_method(name: str) -> Callable[..., Any]:
    """``smooth_model`` / ``rotate_model`` / ``learn_rotations``, imported when first asked for."""
    module, attr = {"smooth": ("smooth", "smooth_model"), "rotate": ("rotate", "rotate_model"),
                    "learn_rotations": ("learned_rotation", "learn_rotations")}[name]
    try:
        return getattr(importlib.import_module(f"{__package__}.{module}"), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"methods: {name!r} is not available in this installation ({err})") from None


def _gptq_options(opts: Mapping[str, Any]) -> Dict[str, Any]:
    """GPTQ's own options of the ``gptq`` method (``asymmetric`` is the feed's: :mod:`.asymmetric`)."""
    return {k: v for k, v in opts.items() if k != "asymmetric"}


@torch.no_grad()
def calibrate_layer(name: str, layer: nn.Module, h: torch.Tensor, methods: Mapping[str, Mapping[str, Any]],
                    moments: Optional[PairedMoments] = None) -> List[LayerReport]:
    """Run the layer methods in ``methods`` on one quant linear layer whose inputs have second
    moment ``h``; store the result as the layer's weight (on the grid, a fixed point of the layer's
    quantizer) unless round to nearest is at least as good on ``tr((W-Q) H (W-Q)^T)``, in which case
    the weight is left as it was. One report per method (a layer the methods cannot handle gets one
    ``skipped`` report saying why).

    ``moments`` (the paired moments of asymmetric GPTQ, :mod:`.asymmetric`; ``h`` is then their
    ``qq``): GPTQ rounds the damped least-squares target :func:`.float_target.float_target_weight`
    (ridge = GPTQ's ``percdamp``) and every candidate is judged on :func:`.float_target.target_error`,
    the error against the float layer on the float model's inputs."""
    asked = [m for m in LAYER_METHODS if m in methods]
    if not asked:
        return []
    reason = grid_unsupported(layer)
    if reason is not None:
        return [LayerReport(name, "+".join(asked), float("nan"), float("nan"), f"skipped: {reason}")]
    if not bool(torch.isfinite(h).all()):
        raise ValueError(f"calibration of layer {name!r}: its input second moment H holds NaN / Inf (non-finite "
                         "activations on the calibration data)")
    w = layer.weight.detach().float()
    o = w.shape[0]
    if moments is None:
        error = lambda q: output_error(w, q, h, o)  # noqa: E731
        unit = "mean squared output error vs float weight on calibration inputs"
    else:
        error = lambda q: target_error(q, w, moments)  # noqa: E731
        unit = "mean squared output error vs the float layer on the float model's inputs (asymmetric)"
    rtn_error = error(layer_fake_quant(layer, w))
    grid = rule_grid(layer)
    reports: List[LayerReport] = []
    best_q, best_error, before = None, rtn_error, rtn_error
    for method in asked:
        opts = methods[method]
        if method == "scale_search":
            grid = search_grid(w, h, grid, **opts)
            q = settle(layer, grid.quantize(w))
        elif method == "two_level_search":
            grid = two_level_layer_grid(layer, w, h, grid, **opts)
            q = settle(layer, grid.quantize(w))
        else:
            gptq_opts = _gptq_options(opts)
            target = w
            if moments is not None:
                target = float_target_weight(w, moments, ridge=gptq_opts.get("percdamp", 0.01)).float()
            q = settle(layer, gptq_quantize(target, h, grid, **gptq_opts))
        err = error(q)
        reports.append(LayerReport(name, method, before, err, unit))
        before = err
        if err < best_error:
            best_q, best_error = q, err
    if best_q is not None:
        layer.set_weight(best_q)
    else:
        last = reports[-1]
        reports[-1] = LayerReport(last.layer, last.method, last.error_before, last.error_after,
                                  unit + "; kept round to nearest (not better)")
    return reports
