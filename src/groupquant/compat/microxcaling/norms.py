"""``LayerNorm`` / ``RMSNorm`` / ``layer_norm`` / ``GroupNorm`` / ``BatchNorm1d`` / ``2d`` / ``3d``
taking ``mx_specs``, each step rounded in microxcaling's order (see :mod:`.norm_steps`).

RMSNorm: ``x = q(x)``; ``ms = mean(q(x * x))``; ``inv = q(1 / q(sqrt(q(ms + eps))))``;
``norm = q(x * inv)``; ``out = q(q(w * norm) + b)``. LayerNorm normalizes over the last dim
(as microxcaling does). BatchNorm in training uses the batch statistics and updates the running
ones as ``q(q((1 - m) * running) + q(m * batch))`` with the batch variance + eps, as microxcaling
does (torch keeps the unbiased variance). As in microxcaling, ``LayerNorm`` / ``RMSNorm`` take
``(hidden_size, eps=1e-12, mx_specs=None, name=None)``; other torch keywords pass through.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Tuple

import torch

from . import _torch
from .module_specs import MxSpecsMixin
from .norm_steps import norm_backward, norm_backward_ln, norm_forward
from .specs import MxSpecs, apply_mx_specs, get_backwards_mx_specs
from ...elementwise.rounded_math import RoundedMath
from .mapping import rounding_kit

__all__ = ["LayerNorm", "RMSNorm", "layer_norm", "GroupNorm", "group_norm", "BatchNorm1d", "BatchNorm2d",
           "BatchNorm3d", "batch_norm"]


def _param_grads(ctx: Any, v: RoundedMath, g: torch.Tensor, norm: torch.Tensor,
                 axes: List[int]) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(grad weight, grad bias): rounded sums over ``axes`` of ``g * norm`` and of ``g`` (None for a
    weight or bias that was not given: inputs 1 and 2 of the autograd function)."""
    gw = v.sum(v.mul(g, norm), axes) if ctx.needs_input_grad[1] else None
    return gw, (v.sum(g, axes) if ctx.needs_input_grad[2] else None)


def _saved_weight(specs: MxSpecs, bf: Optional[torch.Tensor], raw: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The weight the backward reads: rounded with ``quantize_backprop``, else as given."""
    return bf if specs["quantize_backprop"] else raw


def _q_opt(v: RoundedMath, t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else v.q(t)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, specs: MxSpecs):  # type: ignore[override]
        v = rounding_kit(specs)
        bf_w = _q_opt(v, weight)
        st = norm_forward(v, v.q(x), [x.ndim - 1], bf_w, _q_opt(v, bias), eps)
        ctx.save_for_backward(st.norm, st.vare, _saved_weight(specs, bf_w, weight))
        ctx.specs = get_backwards_mx_specs(specs)
        return st.out

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        norm, vare, weight = ctx.saved_tensors
        v = rounding_kit(ctx.specs)
        g = v.q(g)
        gw, gb = _param_grads(ctx, v, g, norm, list(range(g.ndim - 1)))
        return norm_backward_ln(v, g, [g.ndim - 1], weight, norm, vare), gw, gb, None, None


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, specs: MxSpecs):  # type: ignore[override]
        v = rounding_kit(specs)
        x = v.q(x)
        inv = v.recip(v.sqrt(v.add(v.mean(v.mul(x, x), -1, keepdim=True), eps)))
        norm = v.mul(x, inv)
        bf_w, bf_b = _q_opt(v, weight), _q_opt(v, bias)
        out = norm if bf_w is None else v.mul(bf_w, norm)
        out = out if bf_b is None else v.add(out, bf_b)
        ctx.save_for_backward(norm, inv, _saved_weight(specs, bf_w, weight))
        ctx.specs = get_backwards_mx_specs(specs)
        return out

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        norm, inv, weight = ctx.saved_tensors
        v = rounding_kit(ctx.specs)
        g = v.q(g)
        gw, gb = _param_grads(ctx, v, g, norm, list(range(g.ndim - 1)))
        dx1 = v.mul(g if weight is None else v.mul(g, weight), inv)
        proj = v.mean(v.mul(dx1, norm), -1, keepdim=True)
        return v.sub(dx1, v.mul(norm, proj)), gw, gb, None, None


class _ChannelNorm(torch.autograd.Function):
    """GroupNorm (``groups`` set) and BatchNorm (``running`` / ``training`` set) over (N, C, ...)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, groups: Optional[int], running: Any,  # type: ignore[override]
                training: bool, momentum: float, specs: MxSpecs):
        v = rounding_kit(specs)
        bf_w = _q_opt(v, weight)
        axes = list(range(1, x.ndim)) if groups else [0] + list(range(2, x.ndim))
        stats = None if (groups or training) else running
        st = norm_forward(v, v.q(x), axes, bf_w, _q_opt(v, bias), eps, groups=groups, weight_axis=1, running=stats)
        if not groups and training and running is not None:
            for buf, batch in zip(running, (st.mean, st.vare)):
                if buf is not None:
                    buf.copy_(v.add(v.mul(1 - momentum, buf), v.mul(momentum, batch.reshape(buf.shape))))
        ctx.save_for_backward(st.shift, st.norm, st.inv, _saved_weight(specs, bf_w, weight))
        ctx.axes, ctx.groups, ctx.specs = axes, groups, get_backwards_mx_specs(specs)
        return st.out

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        shift, norm, inv, weight = ctx.saved_tensors
        v = rounding_kit(ctx.specs)
        g = v.q(g)
        gw, gb = _param_grads(ctx, v, g, norm, [0] + list(range(2, g.ndim)))
        dx = norm_backward(v, g, ctx.axes, weight, shift, inv, groups=ctx.groups, weight_axis=1)
        return dx, gw, gb, None, None, None, None, None, None


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
    return _LayerNorm.apply(input, weight, bias, eps, apply_mx_specs(mx_specs))


def group_norm(x: torch.Tensor, num_groups: int, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5,
               mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``F.group_norm`` with ``mx_specs`` (plain when None)."""
    if mx_specs is None:
        return _torch.group_norm(x, num_groups, weight, bias, eps)
    return _ChannelNorm.apply(x, weight, bias, eps, num_groups, None, False, 0.0, apply_mx_specs(mx_specs))


def batch_norm(x: torch.Tensor, running_mean: Optional[torch.Tensor], running_var: Optional[torch.Tensor],
               weight: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None, is_training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``F.batch_norm`` with ``mx_specs`` (plain when None); running stats needed unless training."""
    if mx_specs is None:
        return _torch.batch_norm(x, running_mean, running_var, weight, bias, is_training, momentum, eps)
    if not is_training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm(is_training=False) needs running_mean and running_var")
    return _ChannelNorm.apply(x, weight, bias, eps, None, (running_mean, running_var), is_training, momentum, apply_mx_specs(mx_specs))


class LayerNorm(MxSpecsMixin, torch.nn.LayerNorm):
    """``torch.nn.LayerNorm(hidden_size, eps=1e-12)`` taking ``mx_specs`` (microxcaling's signature)."""

    def __init__(self, hidden_size: Any, eps: float = 1e-12, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(hidden_size, eps=eps, **kwargs)
        self._init_mx(mx_specs, name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, mx_specs=self.specs_or_none())


class RMSNorm(MxSpecsMixin, torch.nn.LayerNorm):
    """microxcaling's RMSNorm (a LayerNorm with weight and bias, no mean subtracted); always rounds,
    as there (``mx_specs`` None means the default specs, which round nothing)."""

    def __init__(self, hidden_size: Any, eps: float = 1e-12, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(hidden_size, eps=eps, **kwargs)
        self._init_mx(mx_specs, name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNorm.apply(x, self.weight, self.bias, self.eps, self.mx_specs)


class GroupNorm(MxSpecsMixin, torch.nn.GroupNorm):
    """``torch.nn.GroupNorm`` taking ``mx_specs``."""

    def __init__(self, num_groups: int, num_channels: int, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(num_groups, num_channels, **kwargs)
        self._init_mx(mx_specs, name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps, mx_specs=self.specs_or_none())


class _BatchNormMx(MxSpecsMixin):
    """The forward shared by the BatchNorm modules (momentum None: cumulative average, as torch)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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


class BatchNorm1d(_BatchNormMx, torch.nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` taking ``mx_specs``."""

    def __init__(self, num_features: int, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self._init_mx(mx_specs, name)


class BatchNorm2d(_BatchNormMx, torch.nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` taking ``mx_specs``."""

    def __init__(self, num_features: int, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self._init_mx(mx_specs, name)


class BatchNorm3d(_BatchNormMx, torch.nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` taking ``mx_specs``."""

    def __init__(self, num_features: int, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self._init_mx(mx_specs, name)
