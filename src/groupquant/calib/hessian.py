"""The input second moment ``H = mean(x x^T)`` of a linear layer over calibration tokens, and the
layer objective it defines.

For a linear layer ``y = x W^T``, replacing ``W`` by ``Q`` changes the outputs on the calibration
tokens by a mean squared error of ``tr((W - Q) H (W - Q)^T) / out_features`` per output element
(:func:`output_error`), GPTQ's objective (Frantar et al. 2022, eq. 1) up to the constant factor.
``x`` is the input the layer multiplies: after its online rotation (when :func:`rotate_model` gave
it one: the weight is in the rotated basis) and, for W + A recipes, its input quantizer.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..nn.layers.input_rotation import ROTATION_ATTR

__all__ = ["HessianAccumulator", "output_error"]


class HessianAccumulator:
    """Running ``sum(x x^T)`` (float64 ``[I, I]``) and token count of one linear layer's inputs.

    ``attach()`` registers a forward pre-hook on the layer; ``detach()`` removes it; ``hessian()``
    gives the mean. Inputs are ``[..., I]``; every leading index is a token.
    """

    def __init__(self, layer: nn.Module) -> None:
        self.layer = layer
        self.in_features = layer.weight.shape[1]
        self.sum = torch.zeros(self.in_features, self.in_features, dtype=torch.float64, device=layer.weight.device)
        self.tokens = 0
        self.nonfinite_tokens = 0
        self._handle = None

    def add(self, x: torch.Tensor) -> None:
        """Accumulate the tokens of ``x`` (``[..., I]``); tokens holding NaN / Inf are counted in
        ``nonfinite_tokens`` and left out of the sum (:meth:`check_finite` reports them)."""
        x = x.detach().reshape(-1, x.shape[-1]).double()
        finite = torch.isfinite(x).all(dim=1)
        if not bool(finite.all()):
            self.nonfinite_tokens += int((~finite).sum())
            x = x[finite]
        self.sum.addmm_(x.T, x)
        self.tokens += x.shape[0]

    def check_finite(self, name: str) -> None:
        """A ValueError naming layer ``name`` when some of its input tokens held NaN / Inf."""
        if self.nonfinite_tokens:
            total = self.tokens + self.nonfinite_tokens
            raise ValueError(f"calibration: the inputs of layer {name!r} hold NaN / Inf in {self.nonfinite_tokens} of "
                             f"{total} calibration tokens (the model's activations overflow or the calibration data "
                             "holds non-finite values); its statistics would be NaN. Check the model's float output on "
                             "the calibration data, or run it in a wider dtype")

    def _hook(self, module: nn.Module, args: tuple) -> None:
        x = args[0]
        x = getattr(x, "value", x)  # a quant tensor's values
        rotation = getattr(module, ROTATION_ATTR, None)  # the layer's online rotation (rotate_model) comes first
        if rotation is not None:
            x = rotation(x)
        proxy = getattr(module, "input_quant", None)
        if proxy is not None and getattr(proxy, "tensor_quant", None) is not None:
            with torch.no_grad():
                x = proxy.quant_value(x)
        self.add(x)

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
