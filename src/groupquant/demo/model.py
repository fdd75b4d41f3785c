"""The demo's model: a small MLP on 8x8 digits, and its MX-quantized copies built with groupquant.nn.

``quantized_copy`` converts a deep copy with :func:`groupquant.quantize_model`: every
``nn.Linear`` becomes a ``QuantLinear`` whose weight and input are quantized to one MX element
format (the default MX quantizers: blocks of 32 along the input features, E8M0 floor scales,
round to nearest even). One call gives the post-training-quantized model; training the copy is QAT.
``recipe_copy`` converts a deep copy with a training recipe (``groupquant.nn.RECIPES``): every
operand of the forward GEMM and of both backward GEMMs quantized; ``gemm_operands`` names them.
"""
from __future__ import annotations

import copy
from typing import Dict, Optional, Sequence

import torch
from torch import nn

from ..export import packed_state_dict
from ..nn import QuantLinear, quantize_model, recipe
from ..nn.gemm.grad_slots import GRAD_SLOTS
from ..packing import PackedTensor
from ..quant_tensor import plain
from ..quantizers import MX_QUANTIZERS, MXQuantizerPair, mx_quantizers, quantizer_pair

__all__ = ["MXQuantizerPair", "MX_QUANTIZERS", "mx_quantizers", "build_mlp", "quantized_copy", "recipe_copy",
           "gemm_operands", "GEMM_SLOTS", "weight_sqnr_db", "packed_model_bytes"]

#: The six operand slots of a linear layer's three GEMMs, in the order ``gemm_operands`` lists them.
GEMM_SLOTS = ("input_quant", "weight_quant", *GRAD_SLOTS)


def build_mlp(in_features: int = 64, hidden: Sequence[int] = (128, 128), classes: int = 10,
              seed: int = 0) -> nn.Sequential:
    """``Linear -> ReLU`` for each width in ``hidden``, then a ``Linear`` to ``classes`` logits.

    Initialized from ``seed`` (the global torch RNG is left untouched).
    """
    dims = [in_features, *hidden, classes]
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(f"layer widths must be positive ints, got {dims}")
    layers = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def quantized_copy(model: nn.Module, fmt: str) -> nn.Module:
    """A deep copy of ``model`` with every ``nn.Linear`` a ``QuantLinear`` quantizing weight and input to
    ``fmt`` (an MX format or ``'nvfp4'``, with their default quantizers)."""
    pair = quantizer_pair(fmt)
    return quantize_model(copy.deepcopy(model), weight_quant=pair.weight, input_quant=pair.act)


def recipe_copy(model: nn.Module, name: str) -> nn.Module:
    """A deep copy of ``model`` with every ``nn.Linear`` a ``QuantLinear`` set up by the training
    recipe ``name`` (``groupquant.nn.RECIPES``; an unknown name is an UnknownSettingError)."""
    return quantize_model(copy.deepcopy(model), recipe=recipe(name))


def gemm_operands(layer: QuantLinear) -> Dict[str, Optional[str]]:
    """What quantizes each operand of ``layer``'s three GEMMs: slot name (``GEMM_SLOTS``) -> the
    quantizer class's name, or None where that operand stays in high precision. With backward
    quantization off, the four backward operands are None (the straight-through estimator)."""
    proxies = {"input_quant": layer.input_quant, "weight_quant": layer.weight_quant}
    if layer.quantize_backprop:
        proxies.update({name: getattr(layer, name) for name in GRAD_SLOTS})
    out: Dict[str, Optional[str]] = {}
    for name in GEMM_SLOTS:
        quantizer = getattr(proxies.get(name), "quantizer", None)
        out[name] = None if quantizer is None else quantizer.__name__
    return out


@torch.no_grad()
def weight_sqnr_db(float_model: nn.Module, quant_model: nn.Module) -> float:
    """SQNR in dB of all quantized weights together: ``10 log10(sum w^2 / sum (w - q(w))^2)``.

    Pairs the float model's ``nn.Linear`` weights with the quantized copy's ``QuantLinear`` layers in order.
    """
    floats = [m.weight for m in float_model.modules() if type(m) is nn.Linear]
    quants = [plain(m.quant_weight()) for m in quant_model.modules() if isinstance(m, QuantLinear)]
    if len(floats) != len(quants) or not floats:
        raise ValueError("the quantized model's layers do not match the float model's")
    signal = sum(float(w.double().pow(2).sum()) for w in floats)
    noise = sum(float((w.double() - q.double()).pow(2).sum()) for w, q in zip(floats, quants))
    return float("inf") if noise == 0 else 10.0 * torch.log10(torch.tensor(signal / noise)).item()


def packed_model_bytes(model: nn.Module) -> int:
    """Payload bytes of ``groupquant.export.packed_state_dict(model)``: packed weights (element codes,
    scale bytes and any tensor scale) plus every other tensor (biases in float32); quantizer state not counted."""
    sd = packed_state_dict(model)
    skip = set(sd["quantizer_keys"])  # type: ignore[arg-type]
    packed = sum(PackedTensor.from_record(rec).nbytes for rec in sd["packed"].values())  # type: ignore[union-attr]
    tensors = sum(t.numel() * t.element_size() for k, t in sd["tensors"].items() if k not in skip)  # type: ignore[union-attr]
    return packed + tensors
