"""smooth_model: SmoothQuant's per-channel migration of activation range into weights.

SmoothQuant (Xiao et al., ICML 2023): for linears reading ``x``, ``y = (x diag(s)^-1)(W diag(s))^T``
is the same in float for any positive per-feature ``s``; with
``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)`` (``max|W_j|`` over every reader's column ``j``) the
activation's outlier features shrink and the weights take the range. ``diag(s)^-1`` is folded into
whatever writes ``x`` (:mod:`.graph`): an RMSNorm's weight (Llama ``input_layernorm`` ->
q/k/v, ``post_attention_layernorm`` -> gate/up) or a linear's output rows (``v_proj`` ->
``o_proj``, ``up_proj`` -> ``down_proj``; BERT ``value`` -> ``attention.output.dense``). BERT's
LayerNorms are post-norm and take no fold (the reason is :func:`.graph.bert_norm_refusal`). A
LayerNorm with a bias (StableLM) takes ``diag(s)^-1`` on its weight and its bias.

The pairs are found by module names, then checked by behaviour on the first calibration item, in
float (:func:`groupquant.calib.fold_check.check_groups`): a norm group folds only when each reader
receives exactly the norm's output (Gemma2's ``post_attention_layernorm`` sits after attention,
not before the MLP) and the norm's output scales with its weight and bias (Gemma's ``x * (1 + w)``
does not); a group that fails is left alone and named in the report. After folding, the model's
float output on that item must be the one before, within float rounding
(:func:`groupquant.calib.float_check.check_unchanged`), or the model is restored and the method
refused (:class:`~groupquant.calib.float_check.MethodRefused`).

``alpha=None`` searches ``alpha`` in 0.2, 0.3, ..., 0.8 (:data:`ALPHAS`) per group of linears
sharing an input, and also "no smoothing", minimising the readers' output error (quantized layer vs
float layer, mean squared) on rows of the calibration inputs: a group is never made worse on that
objective.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.layers.input_rotation import ROTATION_ATTR
from ..nn.layers.quant_layers import is_quant_layer
from .blocks import call_model, check_calibration_data, find_stacks, run_model_until
from .float_check import MethodRefused, Snapshot, check_unchanged
from .fold_check import check_groups
from .graph import FoldGroup, bert_layers, fold_groups, llama_mismatch
from ..nn.name_patterns import Patterns, matches_any
from .layer_rotation import exclude_patterns, write_weight
from .report import LayerReport

__all__ = ["smooth_model", "ALPHAS", "smoothing_scale", "smooth_refusal"]

#: the alphas an ``alpha=None`` search tries (besides no smoothing)
ALPHAS = tuple(i / 10 for i in range(2, 9))
#: calibration rows kept per group for the search (evenly spaced over the calibration tokens)
_ROWS = 256


def smoothing_scale(act_max: torch.Tensor, weight_max: torch.Tensor, alpha: float) -> torch.Tensor:
    """``s = act_max^alpha / weight_max^(1 - alpha)`` per feature (float64), 1 where either max is 0."""
    a, w = act_max.double(), weight_max.double()
    s = a.pow(alpha) / w.pow(1 - alpha)
    return torch.where((a > 0) & (w > 0) & torch.isfinite(s), s, torch.ones_like(s)).clamp(1e-5, 1e5)


def run_calibration(model: nn.Module, calibration_data: Iterable[Any], progress: bool, what: str) -> int:
    """Run ``model`` on each item (a tensor: ``model(x)``; a dict: ``model(**x)``) under no_grad;
    the number of items. ValueError for empty data or an item of another kind."""
    items = calibration_data
    if progress:
        try:
            from tqdm import tqdm
            items = tqdm(calibration_data, desc=what, leave=False)
        except ImportError:
            pass
    n = 0
    with torch.no_grad():
        for item in items:
            if not isinstance(item, (dict, torch.Tensor)):
                raise TypeError(f"{what}: calibration_data items must be tensors (model inputs) or dicts of keyword "
                                f"arguments, got {type(item).__name__}")
            call_model(model, item, n)  # (a model error names the item and its shapes)
            n += 1
    if n == 0:
        raise ValueError(f"{what}: calibration_data is empty; give at least one model input")
    return n


class _Recorder:
    """Per-feature abs max and a sample of rows of one linear's input (a forward pre-hook)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.amax: Optional[torch.Tensor] = None
        self.rows: List[torch.Tensor] = []
        self.calls = 0

    def __call__(self, module: nn.Module, args: Tuple[Any, ...]) -> None:
        self.calls += 1
        x = args[0].detach()
        x = x.reshape(-1, x.shape[-1]).float()
        m = x.abs().amax(0)
        self.amax = m if self.amax is None else torch.maximum(self.amax, m)
        step = max(1, x.shape[0] // 128)
        self.rows.append(x[::step][:128].clone())

    def sample(self) -> torch.Tensor:
        rows = torch.cat(self.rows)
        step = max(1, rows.shape[0] // _ROWS)
        return rows[::step][:_ROWS]


def _record(model: nn.Module, items: List[Any], recorders: List[_Recorder], layers: List[nn.Module],
            progress: bool) -> None:
    """Run the model on each item for the ``recorders`` (hooked on ``layers``). Where every layer
    sits in the model's stacks of blocks the forward stops after the last block (the output head,
    49k logits per token for SmolLM2, is not needed); if a recorder then missed an item (a model
    whose last block in module order is not its last to run) the items are run again whole."""
    stacks = find_stacks(model)
    inside = {id(m) for _, blocks in stacks for m in blocks.modules()}
    if stacks and all(id(layer) in inside for layer in layers):
        run_model_until(model, stacks[-1][1][len(stacks[-1][1]) - 1], items)
        if all(r.calls == len(items) for r in recorders):
            return
        for r in recorders:
            r.reset()
    run_calibration(model, items, progress, "smooth_model")


def _quant_output(layer: nn.Module, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The layer's quantized GEMM on ``x`` with weight ``w`` and no bias (a float layer: ``x w^T``)."""
    return layer.quant_gemm(x, w, bias=None) if is_quant_layer(layer) else F.linear(x, w)


def _group_error(group: FoldGroup, x: torch.Tensor, s_in: Optional[torch.Tensor]) -> List[float]:
    """Each reader's output MSE (quantized vs float) on rows ``x`` with input scale ``s_in`` (None: none)."""
    errors = []
    for _, layer in group.targets:
        w = layer.weight.detach().float()
        ref = F.linear(x, w)
        if s_in is None:
            out = _quant_output(layer, x, w)
        else:
            s = s_in.float()
            out = _quant_output(layer, x / s, (w.double() * s_in).float())
        errors.append(float((out - ref).double().pow(2).mean()))
    return errors


def _source_scale(group: FoldGroup, s_in: torch.Tensor) -> torch.Tensor:
    """The scale per source feature behind the readers' input scale (GQA: one per kv feature)."""
    if group.feature_map is None:
        return s_in
    fmap = group.feature_map.to(s_in.device)
    out = torch.ones(int(fmap.max()) + 1, dtype=s_in.dtype, device=s_in.device)
    return out.index_copy(0, fmap, s_in)


def _reader_stats(group: FoldGroup, act_max: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(act max, weight column max) per reader input feature; with a feature map, both pooled over the
    features that repeat one source feature, so the scale is one per source feature."""
    w_max = torch.stack([m.weight.detach().abs().amax(0).float() for _, m in group.targets]).amax(0)
    if group.feature_map is None:
        return act_max, w_max
    fmap = group.feature_map.to(act_max.device)  # made on the CPU; the statistics sit on the model's device
    n = int(fmap.max()) + 1
    pooled_a = torch.zeros(n, device=act_max.device).scatter_reduce(0, fmap, act_max, "amax")
    pooled_w = torch.zeros(n, device=act_max.device).scatter_reduce(0, fmap, w_max.to(act_max.device), "amax")
    return pooled_a[fmap], pooled_w[fmap]


def _apply(group: FoldGroup, s_in: torch.Tensor) -> None:
    """Fold: source output / s, readers' input columns * s (float64, rounded once)."""
    s_src = _source_scale(group, s_in)
    _, src = group.source
    with torch.no_grad():
        if group.kind == "norm":
            write_weight(src, (src.weight.double() / s_src).to(src.weight.dtype))
            if getattr(src, "bias", None) is not None:  # LayerNorm with a bias: (norm(x) w + b) / s
                src.bias.copy_((src.bias.double() / s_src).to(src.bias.dtype))
        else:
            write_weight(src, (src.weight.double() / s_src[:, None]).to(src.weight.dtype))
            if src.bias is not None:
                src.bias.copy_((src.bias.double() / s_src).to(src.bias.dtype))
        for _, layer in group.targets:
            write_weight(layer, (layer.weight.double() * s_in).to(layer.weight.dtype))


def smooth_refusal(model: nn.Module) -> str:
    """Why :func:`fold_groups` finds no pair in ``model`` (empty when it finds some)."""
    if fold_groups(model):
        return ""
    if bert_layers(model):
        return "its BERT-family layers have no value -> output pair"
    return ("found no norm -> linear or linear -> linear pair to fold a scale into (it supports Llama-family and "
            f"BERT-family models from transformers: {llama_mismatch(model)})")


def _check_alpha(alpha: Optional[float]) -> None:
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1):
        raise ValueError(f"smooth_model: alpha must be a number in [0, 1] or None (search), got {alpha!r}")


def smooth_model(model: nn.Module, calibration_data: Iterable[Any], *, alpha: Optional[float] = None,
                 progress: bool = True, exclude: Patterns = None) -> List[LayerReport]:
    """SmoothQuant on a converted model, in place (see the module doc); exact in float.

    Args:
        calibration_data: model inputs (tensors, or dicts of keyword arguments such as
            ``{"input_ids": ...}``); one forward pass records each reader's input.
        alpha: the migration strength in [0, 1] for every group, or None to search it per group
            (the search may also keep a group unsmoothed).
        progress: a progress bar (tqdm, when installed) over the calibration data.
        exclude: module names / fnmatch patterns; a group with an excluded reader or source is
            left alone.

    Returns one :class:`LayerReport` per reader: mean squared output error of the quantized
    layer against the float layer on calibration rows, before and after. Run it before
    ``rotate_model`` (a layer that already rotates its input is skipped, named in the report).
    """
    _check_alpha(alpha)
    items = check_calibration_data(calibration_data)
    groups = fold_groups(model)
    if not groups:
        raise MethodRefused(f"smooth_model on {type(model).__name__}: {smooth_refusal(model)}")
    patterns = exclude_patterns(exclude, [n for n, _ in model.named_modules() if n])
    excluded = lambda name: matches_any(name, patterns)  # noqa: E731
    exact, refused, before = check_groups(model, groups, items[0])
    if not exact:
        raise MethodRefused(f"smooth_model on {type(model).__name__}: no norm -> linear or linear -> linear pair folds "
                            f"exactly: {'; '.join(sorted(set(refused.values())))}")
    snapshot = Snapshot(model)
    reports: List[LayerReport] = []
    active: List[FoldGroup] = []
    for index, g in enumerate(groups):
        names = [g.source[0]] + [n for n, _ in g.targets]
        why = (refused[index] if index in refused else "excluded" if any(excluded(n) for n in names) else
               "its input is already rotated (run smooth_model before rotate_model)"
               if any(getattr(m, ROTATION_ATTR, None) is not None for _, m in g.targets) else "")
        if why:
            reports += [LayerReport(n, "smooth", float("nan"), float("nan"), f"not smoothed: {why}")
                        for n, _ in g.targets]
        else:
            active.append(g)
    recorders: Dict[int, _Recorder] = {}
    handles = []
    for g in active:
        layer = g.targets[0][1]
        if id(layer) not in recorders:
            recorders[id(layer)] = _Recorder()
            handles.append(layer.register_forward_pre_hook(recorders[id(layer)]))
    try:
        _record(model, items, list(recorders.values()), [g.targets[0][1] for g in active], progress)
    finally:
        for h in handles:
            h.remove()
    for g in active:
        rec = recorders[id(g.targets[0][1])]
        x = rec.sample()
        act_max, w_max = _reader_stats(g, rec.amax)
        errors_before = _group_error(g, x, None)
        best, best_err, best_alpha = None, errors_before, None
        for a in (ALPHAS if alpha is None else (float(alpha),)):
            s = smoothing_scale(act_max, w_max, a)
            err = _group_error(g, x, s)
            if alpha is not None or sum(err) < sum(best_err):
                best, best_err, best_alpha = s, err, a
        if best is not None:
            _apply(g, best)
        where = f"{g.kind} {g.source[0]}"
        detail = (f"alpha={best_alpha:g}, folded into {where}" if best is not None else
                  f"no alpha lowered the error: not smoothed ({where})")
        reports += [LayerReport(n, "smooth", e0, e1, detail + "; errors: output MSE vs float on calibration rows")
                    for (n, _), e0, e1 in zip(g.targets, errors_before, best_err)]
    check_unchanged(model, items[0], before, snapshot, "smooth_model")
    return reports
