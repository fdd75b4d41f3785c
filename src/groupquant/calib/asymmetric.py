"""Asymmetric calibration inside ``ptq`` (``methods={"gptq": {"asymmetric": True}}``): each layer's
GPTQ target is the float layer's output on the float model's inputs while it multiplies the
quantized model's inputs (GPTAQ: Y. Li et al., "GPTAQ: Efficient Finetuning-Free Quantization for
Asymmetric Calibration", ICML 2025, arXiv:2504.02692; Qronos, S. Zhang et al. 2025, corrects the
same error).

The "float model" here is the converted model itself with every quantizer off
(:func:`~groupquant.calib.float_check.float_mode`): after ``smooth`` / ``rotate`` its weights and
online rotations compute the float function exactly, in the basis the quantized layers work in,
so the float inputs ``x`` and the quantized ones ``x~`` are comparable. Block by block, each
calibration item runs the block once in float mode on the float hidden states, and every quant
linear records what it multiplies (after its online rotation); the float hidden states for the
next block come from this pass, before the block's weights are calibrated (afterwards the layers
hold quantized weights). Then the layers are calibrated group by group in the order they run
(layers reading one tensor together: Llama's q / k / v, o, gate / up, down): a quantized pass over
the items on the quantized model's hidden states, stopped once the group has run, records each
layer's ``x~`` (after its rotation and input quantizer) and :class:`PairedSums` adds ``x~ x~^T``,
``x~ x^T`` and ``x x^T`` (:class:`~groupquant.calib.float_target.PairedMoments`). Group by group
matters: the target corrects the error of the layers before, so those must be the calibrated
ones (one pass with the whole block round to nearest fits o_proj to errors of round-to-nearest
q / k / v that GPTQ then removes: measured on SmolLM2, docs/calibration-upstream.md).

With those moments, :func:`~groupquant.calib.methods.calibrate_layer` runs GPTQ on the damped
least-squares target ``W* = (W H_qf^T + l W)(H_qq + l I)^-1`` with ``H_qq`` (``l`` = GPTQ's damping):
that quantizes ``||x~ Q^T - x W^T||^2 + l ||Q - W||^2`` in GPTQ's sense, and the layer keeps, of
round to nearest, scale search and GPTQ, the weight with the least ``J``
(:func:`~groupquant.calib.float_target.target_error`).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Hashable, List, Tuple

import torch
from torch import nn

from ..nn.layers.inside import in_quant_layer
from .blocks import BlockInput, _Captured, run_block
from .float_check import float_mode
from .float_target import PairedMoments
from .hessian import HessianAccumulator, transform_key
from .report import LayerReport

__all__ = ["PairedSums", "asymmetric_block"]


class _ItemInputs:
    """The transformed inputs of one item, shared by the layers that read one tensor through one
    transform (q / k / v, gate / up); the raw tensors are held so an id is not reused before
    :meth:`clear`, and the paired products are computed once per shared input."""

    def __init__(self) -> None:
        self._inputs: Dict[Tuple[int, Hashable], Tuple[torch.Tensor, torch.Tensor]] = {}
        self._products: Dict[Tuple[Any, ...], Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def record(self, x: torch.Tensor, key: Hashable, transform: Any, dtype: torch.dtype) -> torch.Tensor:
        """``transform(x)`` as ``[tokens, I]`` of ``dtype``, computed once per tensor and key."""
        slot = (id(x), key)
        if slot not in self._inputs:
            t = transform(x).detach()
            self._inputs[slot] = (x, t.reshape(-1, t.shape[-1]).to(dtype))
        return self._inputs[slot][1]

    def products(self, xq: torch.Tensor, xf: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(x~^T x~, x~^T x, x^T x)`` in float64, cached by the two tensors' identities."""
        slot = (id(xq), id(xf))
        if slot not in self._products:
            if xq.shape != xf.shape:
                raise ValueError("asymmetric calibration: a layer saw different tokens in the float and the quantized "
                                 f"pass of one item ({tuple(xf.shape)} vs {tuple(xq.shape)})")
            q, f = xq.double(), xf.double()
            if not (bool(torch.isfinite(q).all()) and bool(torch.isfinite(f).all())):
                raise ValueError("asymmetric calibration: a layer's inputs hold NaN / Inf on the calibration data "
                                 "(check the model's float output on it, or run it in a wider dtype)")
            self._products[slot] = (q.T @ q, q.T @ f, f.T @ f)
        return self._products[slot]

    def clear(self) -> None:
        self._inputs.clear()
        self._products.clear()


class _FloatInputs:
    """The float pass of a block: each layer's input per item (after its online rotation; float32,
    shared between layers reading one tensor), the order the layers first run in, and the groups of
    layers reading one tensor (in that order)."""

    def __init__(self, layers: Dict[str, nn.Module]) -> None:
        self.per_item: List[Dict[str, List[torch.Tensor]]] = []
        self.order: List[str] = []
        self._reads: Dict[str, Tuple[int, Hashable]] = {}  # layer -> (input id, key) on the first item
        self._cache = _ItemInputs()
        self._handles = []
        for name, layer in layers.items():
            acc = HessianAccumulator(layer)  # (its transform: rotation, then the input quantizer, off here)
            self._handles.append(layer.register_forward_pre_hook(self._hook(name, acc, transform_key(layer))))

    def _hook(self, name: str, acc: HessianAccumulator, key: Hashable) -> Any:
        def hook(module: nn.Module, args: tuple) -> None:
            x = getattr(args[0], "value", args[0])
            with in_quant_layer():
                t = self._cache.record(x, key, acc.transform, torch.float32)
            self.per_item[-1].setdefault(name, []).append(t)
            if len(self.per_item) == 1 and name not in self._reads:
                self.order.append(name)
                self._reads[name] = (id(x), key)
        return hook

    def start_item(self) -> None:
        self._cache.clear()
        self.per_item.append({})

    def detach(self) -> None:
        self._cache.clear()
        for handle in self._handles:
            handle.remove()

    def groups(self) -> List[List[str]]:
        """The layers in the order they first ran, consecutive layers reading one tensor together."""
        out: List[List[str]] = []
        for name in self.order:
            if out and self._reads[out[-1][-1]] == self._reads[name]:
                out[-1].append(name)
            else:
                out.append([name])
        return out


class PairedSums(HessianAccumulator):
    """Float64 sums of ``x~ x~^T``, ``x~ x^T`` and ``x x^T`` of one quant linear over the items
    (module doc): its hook takes ``x~`` in the quantized pass, :meth:`pair` adds one item against
    the float pass's inputs; :meth:`moments` gives the means."""

    def __init__(self, layer: nn.Module, inputs: _ItemInputs) -> None:
        super().__init__(layer)
        self.inputs = inputs
        self.qf = torch.zeros_like(self.sum)
        self.ff = torch.zeros_like(self.sum)
        self._key = transform_key(layer)
        self.seen: List[torch.Tensor] = []

    def _hook(self, module: nn.Module, args: tuple) -> None:
        x = args[0]
        with in_quant_layer():  # calibration's own tensor calls: a functional-quantization mode leaves them alone
            self.seen.append(self.inputs.record(getattr(x, "value", x), self._key, self.transform, torch.float64))

    def pair(self, floated: List[torch.Tensor]) -> None:
        """Add the item whose quantized pass was just recorded, against its float inputs ``floated``."""
        seen, self.seen = self.seen, []
        if len(seen) != len(floated):
            raise ValueError(f"asymmetric calibration: a layer ran {len(floated)} time(s) in the float pass and "
                             f"{len(seen)} in the quantized pass of one item")
        for xq, xf in zip(seen, floated):
            qq, qf, ff = self.inputs.products(xq, xf)
            self.sum += qq
            self.qf += qf
            self.ff += ff
            self.tokens += xq.shape[0]

    def moments(self) -> PairedMoments:
        """The means over the tokens seen (ValueError when none were)."""
        h = self.hessian()
        return PairedMoments(h, self.qf / self.tokens, self.ff / self.tokens, self.tokens)


def _stop_after(layers: Dict[str, nn.Module], calls: Dict[str, int]) -> List[Any]:
    """Hooks raising blocks' stop signal (``_Captured``) once every layer of ``layers`` has run
    ``calls[name]`` times: the quantized pass ends there."""
    left = dict(calls)

    def hook(name: str) -> Any:
        def after(module: nn.Module, args: tuple, output: Any) -> None:
            left[name] -= 1
            if all(v <= 0 for v in left.values()):
                raise _Captured()
        return after
    return [layer.register_forward_hook(hook(name)) for name, layer in layers.items()]


def asymmetric_block(model: nn.Module, block: nn.Module, layers: Dict[str, nn.Module], quantized: List[BlockInput],
                     floated: List[BlockInput],
                     calibrate: Callable[[Dict[str, nn.Module], Dict[str, PairedSums]], List[LayerReport]]
                     ) -> Tuple[List[LayerReport], List[BlockInput]]:
    """Calibrate ``layers`` of ``block`` with paired moments (module doc): one float pass over the
    items (``floated`` inputs: it records every layer's float input and gives the float hidden states
    for the next block, returned), then, group by group in the order the layers run (layers reading
    one tensor together: q / k / v, then o, then gate / up, then down), a quantized pass over the
    items (``quantized`` inputs, stopped once the group has run) whose paired moments ``calibrate``
    turns into the group's weights, so each group sees the calibrated groups before it."""
    if len(quantized) != len(floated):
        raise ValueError(f"asymmetric calibration: {len(quantized)} quantized and {len(floated)} float block inputs")
    recorder = _FloatInputs(layers)
    next_float: List[BlockInput] = []
    try:
        with float_mode(model):
            for f_in in floated:
                recorder.start_item()
                next_float += run_block(model, block, [f_in])
    finally:
        recorder.detach()
    reports: List[LayerReport] = []
    unseen = [name for name in layers if name not in recorder.order]  # (no token reached them: reported by calibrate)
    if unseen:
        reports += calibrate({name: layers[name] for name in unseen},
                             {name: PairedSums(layers[name], _ItemInputs()) for name in unseen})
    for group in recorder.groups():
        members = {name: layers[name] for name in group}
        inputs = _ItemInputs()
        sums = {name: PairedSums(layer, inputs).attach() for name, layer in members.items()}
        try:
            for q_in, recorded in zip(quantized, recorder.per_item):
                stops = _stop_after(members, {name: len(recorded.get(name, ())) for name in group})
                try:
                    run_block(model, block, [q_in])
                except _Captured:
                    pass
                finally:
                    for handle in stops:
                        handle.remove()
                for name, acc in sums.items():
                    acc.pair(recorded.get(name, []))
                inputs.clear()
        finally:
            for acc in sums.values():
                acc.detach()
        reports += calibrate(members, sums)
    return reports, next_float
