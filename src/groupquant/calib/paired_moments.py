"""The paired input moments of one linear layer in two models that see the same tokens: the
quantized model's layer (its input after the online rotation and input quantizer, as
:class:`~groupquant.calib.hessian.HessianAccumulator` takes it) and the float model's layer (its
input as it is). Each model's forward on an item is recorded, then :meth:`PairedAccumulator.pair`
adds ``x~ x~^T``, ``x~ x^T`` and ``x x^T`` of that item's tokens (float64 sums).
"""
from __future__ import annotations

from typing import List

import torch
from torch import nn

from .float_target import PairedMoments
from .hessian import HessianAccumulator

__all__ = ["PairedAccumulator"]


class _Recorder(HessianAccumulator):
    """A HessianAccumulator whose ``add`` keeps the (rotated, quantized) inputs instead of summing them."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__(layer)
        self.seen: List[torch.Tensor] = []

    def add(self, x: torch.Tensor) -> None:
        self.seen.append(x.detach().reshape(-1, x.shape[-1]).double())


class PairedAccumulator:
    """Sums of the paired moments of ``quant_layer`` (in the quantized model) and ``float_layer``."""

    def __init__(self, quant_layer: nn.Module, float_layer: nn.Module) -> None:
        n = quant_layer.weight.shape[1]
        if float_layer.weight.shape != quant_layer.weight.shape:
            raise ValueError(f"the float layer's weight has shape {tuple(float_layer.weight.shape)}, the quantized "
                             f"layer's {tuple(quant_layer.weight.shape)}: the two models must be the same architecture")
        device = quant_layer.weight.device
        self.qq, self.qf, self.ff = (torch.zeros(n, n, dtype=torch.float64, device=device) for _ in range(3))
        self.tokens = 0
        self.quant = _Recorder(quant_layer)
        self.float_seen: List[torch.Tensor] = []
        self._handles = [float_layer.register_forward_pre_hook(self._float_hook)]

    def _float_hook(self, module: nn.Module, args: tuple) -> None:
        x = getattr(args[0], "value", args[0])
        self.float_seen.append(x.detach().reshape(-1, x.shape[-1]).double())

    def attach(self) -> "PairedAccumulator":
        self.quant.attach()
        return self

    def detach(self) -> None:
        self.quant.detach()
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def pair(self) -> None:
        """Add the recorded inputs of one item (both models' calls, in order) and forget them."""
        xq = torch.cat(self.quant.seen) if self.quant.seen else None
        xf = torch.cat(self.float_seen) if self.float_seen else None
        self.quant.seen, self.float_seen = [], []
        if xq is None and xf is None:
            return
        if xq is None or xf is None or xq.shape != xf.shape:
            raise ValueError("the quantized and the float layer saw different tokens on one item "
                             f"({None if xq is None else tuple(xq.shape)} vs {None if xf is None else tuple(xf.shape)})")
        xf = xf.to(xq.device)
        self.qq.addmm_(xq.T, xq)
        self.qf.addmm_(xq.T, xf)
        self.ff.addmm_(xf.T, xf)
        self.tokens += xq.shape[0]

    def moments(self) -> PairedMoments:
        """The means (ValueError when no token was seen)."""
        if self.tokens == 0:
            raise ValueError("no calibration token reached this layer")
        return PairedMoments(self.qq / self.tokens, self.qf / self.tokens, self.ff / self.tokens, self.tokens)
