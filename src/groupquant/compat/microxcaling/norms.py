"""``LayerNorm`` / ``RMSNorm`` / ``layer_norm`` / ``GroupNorm`` / ``BatchNorm1d`` / ``2d`` / ``3d``
taking ``mx_specs``: :mod:`groupquant.elementwise.normalization`'s ops run with the rounding kit of
``mx_specs`` (:func:`.mapping.rounding_kit`, microxcaling's formulas: every step rounded in its order,
its LayerNorm and RMSNorm backward, its running-statistics update), the kit of the backward specs
for the gradient; the result keeps the input's dtype.

RMSNorm: ``x = q(x)``; ``ms = mean(q(x * x))``; ``inv = q(1 / q(sqrt(q(ms + eps))))``;
``norm = q(x * inv)``; ``out = q(q(w * norm) + b)``. LayerNorm normalizes over the last dim
(as microxcaling does). BatchNorm in training uses the batch statistics and updates the running
ones as ``q(q((1 - m) * running) + q(m * batch))`` with the batch variance + eps, as microxcaling
does (torch keeps the unbiased variance). As in microxcaling, ``LayerNorm`` / ``RMSNorm`` take
``(hidden_size, eps=1e-12, mx_specs=None, name=None)``; other torch keywords pass through.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import torch

from ... import elementwise as ew
from . import _torch
from .mapping import rounded
from .module_specs import MxSpecsMixin, calls, mx_module

__all__ = ["LayerNorm", "RMSNorm", "layer_norm", "GroupNorm", "group_norm", "BatchNorm1d", "BatchNorm2d",
           "BatchNorm3d", "batch_norm"]


def layer_norm(input: torch.Tensor, normalized_shape: Any, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-12,
               mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``F.layer_norm`` over the last dim with ``mx_specs`` (plain when None)."""
    if mx_specs is None:
        return _torch.layer_norm(input, normalized_shape, weight, bias, eps)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) != 1 or shape[0] != input.shape[-1]:
        raise NotImplementedError(f"layer_norm with mx_specs normalizes the last dim only; got normalized_shape="
                                  f"{normalized_shape!r} for an input of shape {tuple(input.shape)}")
    return rounded(ew.layer_norm, input, mx_specs, shape, weight, bias, eps)


def group_norm(x: torch.Tensor, num_groups: int, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5,
               mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``F.group_norm`` with ``mx_specs`` (plain when None)."""
    if mx_specs is None:
        return _torch.group_norm(x, num_groups, weight, bias, eps)
    return rounded(ew.group_norm, x, mx_specs, num_groups, weight, bias, eps)


def batch_norm(x: torch.Tensor, running_mean: Optional[torch.Tensor], running_var: Optional[torch.Tensor],
               weight: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None, is_training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``F.batch_norm`` with ``mx_specs`` (plain when None); running stats needed unless training."""
    if mx_specs is None:
        return _torch.batch_norm(x, running_mean, running_var, weight, bias, is_training, momentum, eps)
    if not is_training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm(is_training=False) needs running_mean and running_var")
    return rounded(ew.batch_norm, x, mx_specs, running_mean, running_var, weight, bias, is_training, momentum, eps)


class LayerNorm(MxSpecsMixin, torch.nn.LayerNorm):
    """``torch.nn.LayerNorm(hidden_size, eps=1e-12)`` taking ``mx_specs`` (microxcaling's signature)."""

    def __init__(self, hidden_size: Any, eps: float = 1e-12, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(hidden_size, eps=eps, **kwargs)
        self._init_mx(mx_specs, name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, mx_specs=self.specs_or_none())


class RMSNorm(LayerNorm):
    """microxcaling's RMSNorm (a LayerNorm with weight and bias, no mean subtracted); always rounds,
    as there (``mx_specs`` None means the default specs, which round nothing)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rounded(ew.rms_norm, x, self.mx_specs, self.normalized_shape, self.weight, self.eps, bias=self.bias)


GroupNorm = mx_module(torch.nn.GroupNorm, 2, calls(group_norm, "num_groups", "weight", "bias", "eps"))


def _batch_norm_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """The BatchNorm modules' forward, as torch's (momentum None: cumulative average) with ``mx_specs``."""
    self._check_input_dim(x)
    if self.mx_none:
        return torch.nn.modules.batchnorm._BatchNorm.forward(self, x)
    factor = 0.0 if self.momentum is None else self.momentum
    if self.training and self.track_running_stats and self.num_batches_tracked is not None:
        self.num_batches_tracked.add_(1)
        if self.momentum is None:
            factor = 1.0 / float(self.num_batches_tracked)
    training = self.training or self.running_mean is None
    track = not self.training or self.track_running_stats
    return batch_norm(x, self.running_mean if track else None, self.running_var if track else None,
                      self.weight, self.bias, training, factor, self.eps, mx_specs=self.mx_specs)


BatchNorm1d = mx_module(torch.nn.BatchNorm1d, 1, _batch_norm_forward)
BatchNorm2d = mx_module(torch.nn.BatchNorm2d, 1, _batch_norm_forward)
BatchNorm3d = mx_module(torch.nn.BatchNorm3d, 1, _batch_norm_forward)
