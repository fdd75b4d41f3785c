"""The input second moment ``H = mean(x x^T)`` of a linear layer over calibration tokens, and the
layer objective it defines.

For a linear layer ``y = x W^T``, replacing ``W`` by ``Q`` changes the outputs on the calibration
tokens by a mean squared error of ``tr((W - Q) H (W - Q)^T) / out_features`` per output element
(:func:`output_error`), GPTQ's objective (Frantar et al. 2022, eq. 1) up to the constant factor.
``x`` is the input the layer multiplies: after its online rotation (when :func:`rotate_model` gave
it one: the weight is in the rotated basis) and, for W + A recipes, its input quantizer.

Layers reading one tensor (Llama's q / k / v projections, gate / up) with the same rotation and an
input quantizer of the same deterministic spec multiply the same ``x``: accumulators sharing a
:class:`SharedInputs` compute that ``x`` and its product ``x^T x`` once per tensor and each add it
(the sums are the ones each would compute alone, bit for bit).
"""
from __future__ import annotations

from typing import Any, Dict, Hashable, Optional, Tuple

import torch
from torch import nn

from ..nn.layers.input_rotation import ROTATION_ATTR, InputRotation
from ..nn.layers.inside import in_quant_layer
from ..nn.layers.quant_layers import is_quant_layer

__all__ = ["HessianAccumulator", "SharedInputs", "output_error"]


#: A layer input's product: (``x^T x`` float64 ``[I, I]`` over its finite tokens, finite tokens, non-finite tokens).
Product = Tuple[torch.Tensor, int, int]


def input_product(x: torch.Tensor) -> Product:
    """``x^T x`` (float64) of the tokens of ``x`` (``[..., I]``) that hold no NaN / Inf, with the
    counts of those tokens and of the others."""
    x = x.detach().reshape(-1, x.shape[-1]).double()
    finite = torch.isfinite(x).all(dim=1)
    nonfinite = 0
    if not bool(finite.all()):
        nonfinite = int((~finite).sum())
        x = x[finite]
    return x.T @ x, x.shape[0], nonfinite


def transform_key(layer: nn.Module) -> Hashable:
    """What the Hessian hook does to ``layer``'s input before the product (its online rotation, its
    input quantizer), as a key: two layers with equal keys turn one tensor into equal inputs. A
    rotation other than a plain :class:`~groupquant.nn.layers.input_rotation.InputRotation` and an input
    quantizer that is not deterministic abs-max (stochastic rounding, running or learned scales)
    are keyed by their own identity (never shared)."""
    rotation = getattr(layer, ROTATION_ATTR, None)
    rot: Hashable = None
    if rotation is not None:
        rot = ("hadamard", rotation.block_size) if type(rotation) is InputRotation else ("module", id(rotation))
    proxy = layer.input_quant if is_quant_layer(layer) else None
    quant: Hashable = None
    if proxy is not None and proxy.is_quant_enabled:
        spec = getattr(proxy, "spec", None)
        shareable = spec is not None and spec.is_dynamic and spec.rounding != "stochastic"
        quant = ("spec", spec) if shareable else ("proxy", id(proxy))
    return rot, quant


class SharedInputs:
    """The products of the last few layer inputs, by (tensor, :func:`transform_key`), for
    accumulators of layers that read one tensor (module doc). The tensors are held (so an id is not
    reused) and checked unchanged (their version counter); ``keep`` entries at most (two ``[I, I]``
    float64 products: q / k / v and gate / up are called one after the other)."""

    def __init__(self, keep: int = 2) -> None:
        self.keep = keep
        self.computed = 0  # products computed (a test counts the work)
        self._entries: Dict[Tuple[int, Hashable], Tuple[torch.Tensor, int, Product]] = {}

    def product(self, x: torch.Tensor, key: Hashable, transform: Any) -> Product:
        """The product of ``transform(x)``, computed once per tensor ``x`` and ``key``."""
        slot = (id(x), key)
        hit = self._entries.get(slot)
        if hit is not None and hit[0] is x and hit[1] == x._version:
            return hit[2]
        out = input_product(transform(x))
        self.computed += 1
        self._entries.pop(slot, None)
        self._entries[slot] = (x, x._version, out)
        while len(self._entries) > self.keep:
            del self._entries[next(iter(self._entries))]
        return out


class HessianAccumulator:
    """Running ``sum(x x^T)`` (float64 ``[I, I]``) and token count of one linear layer's inputs.

    ``attach()`` registers a forward pre-hook on the layer; ``detach()`` removes it; ``hessian()``
    gives the mean. Inputs are ``[..., I]``; every leading index is a token. ``shared``: a
    :class:`SharedInputs` that accumulators of layers reading one tensor share (module doc).
    """

    def __init__(self, layer: nn.Module, shared: Optional[SharedInputs] = None) -> None:
        self.layer = layer
        self.in_features = layer.weight.shape[1]
        self.sum = torch.zeros(self.in_features, self.in_features, dtype=torch.float64, device=layer.weight.device)
        self.tokens = 0
        self.nonfinite_tokens = 0
        self.shared = shared
        self._key = transform_key(layer) if shared is not None else None
        self._handle = None

    def add(self, x: torch.Tensor) -> None:
        """Accumulate the tokens of ``x`` (``[..., I]``); tokens holding NaN / Inf are counted in
        ``nonfinite_tokens`` and left out of the sum (:meth:`check_finite` reports them)."""
        self.add_product(input_product(x))

    def add_product(self, product: Product) -> None:
        """Accumulate an :func:`input_product`."""
        p, tokens, nonfinite = product
        self.sum += p
        self.tokens += tokens
        self.nonfinite_tokens += nonfinite

    def check_finite(self, name: str) -> None:
        """A ValueError naming layer ``name`` when some of its input tokens held NaN / Inf."""
        if self.nonfinite_tokens:
            total = self.tokens + self.nonfinite_tokens
            raise ValueError(f"calibration: the inputs of layer {name!r} hold NaN / Inf in {self.nonfinite_tokens} of "
                             f"{total} calibration tokens (the model's activations overflow or the calibration data "
                             "holds non-finite values); its statistics would be NaN. Check the model's float output on "
                             "the calibration data, or run it in a wider dtype")

    def transform(self, x: Any) -> torch.Tensor:
        """The input the layer multiplies: ``x`` (a quant tensor's values) after the layer's online
        rotation and its input quantizer."""
        x = getattr(x, "value", x)  # a quant tensor's values
        rotation = getattr(self.layer, ROTATION_ATTR, None)  # the layer's online rotation comes first
        if rotation is not None:
            x = rotation(x)
        proxy = self.layer.input_quant if is_quant_layer(self.layer) else None
        if proxy is not None and proxy.is_quant_enabled:
            with torch.no_grad():
                x = proxy.quant_value(x)
        return x

    def _hook(self, module: nn.Module, args: tuple) -> None:
        with in_quant_layer():  # calibration's own tensor calls: a functional-quantization mode leaves them alone
            if self.shared is None:
                self.add(self.transform(args[0]))
            else:
                self.add_product(self.shared.product(args[0], self._key, self.transform))

    def attach(self) -> "HessianAccumulator":
        self._handle = self.layer.register_forward_pre_hook(self._hook)
        return self

    def detach(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def hessian(self) -> torch.Tensor:
        """``mean(x x^T)`` over the tokens seen (float64); a ValueError when none were seen."""
        if self.tokens == 0:
            raise ValueError("no calibration token reached this layer: it is not used by the model's forward on "
                             "the calibration data")
        return self.sum / self.tokens


def output_error(w: torch.Tensor, q: torch.Tensor, h: torch.Tensor, out_features: Optional[int] = None) -> float:
    """``tr((w - q) h (w - q)^T) / out_features`` in float64: the mean squared output error of
    using ``q`` for ``w`` on inputs whose second moment is ``h``."""
    d = (w.double() - q.double())
    return float(((d @ h) * d).sum() / (out_features or w.shape[0]))
