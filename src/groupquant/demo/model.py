"""The demo's model: a small MLP on 8x8 digits, and its MX-quantized copies.

``quantized_copy`` swaps every ``nn.Linear`` for a layer that fake-quantizes its weight and its
input to one MX element format (blocks of 32 along the input features, E8M0 scales, OCP rules),
so one call gives the post-training-quantized model, and training the copy is QAT.
"""
from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..formats import get_format
from ..ops import fake_quant

__all__ = ["build_mlp", "quantized_copy", "MXLinear", "weight_sqnr_db", "packed_model_bytes"]


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


class MXLinear(nn.Module):
    """An ``nn.Linear`` whose weight and input are fake-quantized to ``fmt`` (MX, blocks of 32).

    Groups run along the input features (the reduction dim) for both. Gradients pass straight through.
    """

    def __init__(self, linear: nn.Linear, fmt: str, block_size: int = 32):
        super().__init__()
        self.fmt = get_format(fmt).name
        self.block_size = block_size
        self.weight = nn.Parameter(linear.weight.detach().clone())
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())

    def quant_weight(self) -> torch.Tensor:
        """The weight as the layer uses it (dequantized MX values)."""
        return fake_quant(self.weight, self.fmt, self.block_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = fake_quant(x, self.fmt, self.block_size)
        return F.linear(x, self.quant_weight(), self.bias)

    def extra_repr(self) -> str:
        return f"in={self.weight.shape[1]}, out={self.weight.shape[0]}, fmt={self.fmt}, block_size={self.block_size}"


def quantized_copy(model: nn.Module, fmt: str, block_size: int = 32) -> nn.Module:
    """A deep copy of ``model`` with every ``nn.Linear`` replaced by an :class:`MXLinear` of ``fmt``."""
    get_format(fmt)  # unknown names fail here, naming the format
    out = copy.deepcopy(model)
    for name, child in list(out.named_children()):
        if isinstance(child, nn.Linear):
            setattr(out, name, MXLinear(child, fmt, block_size))
        else:
            setattr(out, name, quantized_copy(child, fmt, block_size) if list(child.children()) else child)
    return out


@torch.no_grad()
def weight_sqnr_db(float_model: nn.Module, quant_model: nn.Module) -> float:
    """SQNR in dB of all quantized weights together: ``10 log10(sum w^2 / sum (w - q(w))^2)``.

    Pairs the float model's ``nn.Linear`` weights with the quantized copy's layers in order.
    """
    floats = [m.weight for m in float_model.modules() if isinstance(m, nn.Linear)]
    quants = [m.quant_weight() for m in quant_model.modules() if isinstance(m, MXLinear)]
    if len(floats) != len(quants) or not floats:
        raise ValueError("the quantized model's layers do not match the float model's")
    signal = sum(float(w.double().pow(2).sum()) for w in floats)
    noise = sum(float((w.double() - q.double()).pow(2).sum()) for w, q in zip(floats, quants))
    return float("inf") if noise == 0 else 10.0 * torch.log10(torch.tensor(signal / noise)).item()


def packed_model_bytes(model: nn.Module, fmt: str, block_size: int = 32) -> int:
    """Bytes of the model stored packed: each weight at the format's bits per element (rounded up to
    whole bytes per tensor) plus one E8M0 byte per block; biases stay float32 (4 bytes each)."""
    bits = get_format(fmt).bit_width
    total = 0
    for m in model.modules():
        if isinstance(m, (nn.Linear, MXLinear)):
            out_f, in_f = m.weight.shape
            blocks = -(-in_f // block_size)
            total += -(-out_f * in_f * bits // 8) + out_f * blocks
            if m.bias is not None:
                total += 4 * m.bias.numel()
    return total
