"""What the language-model report measures: storage bits per quantized weight, bytes of a model's
weights in memory, bytes of files on disk, and greedy generation speed.

Bits per weight are read through the one quantized-weight accessor,
``layer.group_quantized_weight()`` (QuantLinear and PackedLinear alike): element bits of every
code (block padding included) + scale bits of every block + 32 bits per tensor scale, over the
layer's weight count.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn

from ..nn.layers.group_quantized_weight import WeightNotGroupQuantized
from ..nn.layers.quant_layers import iter_quant_layers

__all__ = ["WeightBits", "Generation", "quantized_weight_bits", "model_bytes", "path_bytes", "generate"]


@dataclass(frozen=True)
class WeightBits:
    """Storage of the group-quantized weights of a model: ``weights`` (count), ``bits`` (total),
    ``layers`` (how many layers); ``per_weight`` is ``bits / weights`` (NaN when there are none)."""

    weights: int
    bits: int
    layers: int

    @property
    def per_weight(self) -> float:
        return self.bits / self.weights if self.weights else float("nan")


@dataclass(frozen=True)
class Generation:
    """A greedy generation: the ``text`` of the new tokens, ``new_tokens`` (count) and ``seconds``
    (wall time of ``model.generate``, prompt processing included)."""

    text: str
    new_tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else float("nan")


def quantized_weight_bits(model: nn.Module) -> WeightBits:
    """Storage bits of every group-quantized weight in ``model`` (module doc); a module registered
    under several names counts once, layers whose weight is not quantized are left out."""
    weights = bits = layers = 0
    for _, module in iter_quant_layers(model):  # (each module once)
        try:
            q = module.group_quantized_weight()
        except WeightNotGroupQuantized:
            continue  # a quant layer whose weight is float (or not group-wise): not counted
        count = 1
        for n in q.layout.shape:
            count *= int(n)
        bits += q.codes.numel() * q.fmt.bit_width + q.scale.numel() * q.scale_format.bit_width
        bits += 32 if q.tensor_scale is not None else 0
        weights += count
        layers += 1
    return WeightBits(weights, bits, layers)


def model_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters, buffers and packed layers' records (a ``PackedLinear``
    holds its codes, scale bytes, decoding tables and bias in one record, not in buffers) in
    memory, each storage counted once (tied weights count once)."""
    from ..export import PackedLinear  # (only a model that was packed has any; export is heavy to import)

    tensors = list(model.parameters()) + list(model.buffers())
    for m in model.modules():
        if isinstance(m, PackedLinear):
            tensors += [t for t in m.state.tensors().values() if t is not None]
    seen, total = set(), 0
    for tensor in tensors:
        key = (tensor.untyped_storage().data_ptr(), tensor.device)
        if key in seen:
            continue
        seen.add(key)
        total += tensor.untyped_storage().nbytes()
    return total


def path_bytes(path: str) -> int:
    """Bytes of a file, or of every file under a folder."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def generate(model: nn.Module, tokenizer: Any, prompt: str, *, max_new_tokens: int) -> Generation:
    """Greedy decoding of up to ``max_new_tokens`` tokens after ``prompt`` with ``model.generate``
    (batch 1), timed."""
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = pad if pad is not None else getattr(tokenizer, "eos_token_id", None)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=pad)
    seconds = time.perf_counter() - start
    new = out[0, ids.shape[1]:]
    return Generation(tokenizer.decode(new, skip_special_tokens=True), int(new.numel()), seconds)
