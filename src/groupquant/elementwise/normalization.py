"""Normalisation layers in an element precision, forward and backward: layer_norm, rms_norm,
group_norm, batch_norm (training statistics or running statistics).

x = q(input), g = q(grad_output); ``eps`` is added as a float32 constant (not rounded first).
Statistics over the normalised dims D (n elements):
  mu = q(q(sum_D x) / n); xs = q(x - mu); sq = q(xs * xs); var = q(q(sum_D sq) / n);
  ve = q(var + eps); sd = q(sqrt ve); inv = q(1 / sd); xn = q(xs * inv)
  backward (microxcaling's _norm_backward): dxs = q(g * inv); dmu = q(q(sum_D -dxs) / n);
  a = q(g * xs); a = q(q(sum_D a) / n); v = q(inv * inv); a = q(a * v); a = q(a * inv);
  b = q(-a * xs); dx = q(dxs + b); dx = q(dx + dmu)
Running statistics (batch_norm eval): mu = q(running_mean), var = q(running_var), then from xs on as
above; backward dx = q(g * inv).
RMS norm: sq = q(x * x); ms = q(q(sum_D sq) / n); ve = q(ms + eps); sd = q(sqrt ve); inv = q(1 / sd);
  xn = q(x * inv); backward: a = q(g * xn); a = q(q(sum_D a) / n); b = q(xn * a); c = q(g - b); dx = q(c * inv)
Affine: y = q(q(xn * weight) + bias) through :func:`~.arithmetic.mul` and :func:`~.arithmetic.add`, whose
backward gives dweight = q(sum q(g * xn)) and dbias = q(sum g) over the broadcast dims.

With the kit's ``formulas="microxcaling"`` (microxcaling's norms):
  layer_norm backward (DeepSpeed's, from xn and ve): sd = q(sqrt ve); i = q(1 / sd) (the kit's division);
  dxs = q(g * i); a = q(q(g * xn) * sd); a = q(q(sum_D a) / n); a = q(a * q(1 / ve));
  dx = q(dxs + q(-a * xn)); dx = q(dx + q(-q(q(sum_D dx) / n)))
  batch_norm on running statistics: the backward of batch statistics above (not dx = q(g * inv));
  rms_norm backward: d1 = q(g * inv); a = q(q(sum_D q(d1 * xn)) / n); dx = q(d1 - q(xn * a));
  running statistics (batch_norm training): r = q(q((1 - momentum) * r) + q(momentum * s)), s the
  rounded batch mean and ve (the variance plus eps).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

import torch

from ..ops.precision import PrecisionLike
from .arithmetic import add, mul
from .rounded_math import RoundedMath, math_for

__all__ = ["layer_norm", "rms_norm", "group_norm", "batch_norm"]


def _var_eps(m: RoundedMath, var: torch.Tensor, eps: float) -> torch.Tensor:
    """ve = q(var + eps)."""
    return m.add(var, torch.tensor(eps, dtype=torch.float32))


def _inv_std(m: RoundedMath, var: torch.Tensor, eps: float) -> torch.Tensor:
    """inv = q(1 / q(sqrt(q(var + eps))))."""
    return m.recip(m.sqrt(_var_eps(m, var, eps)))


class _Normalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, dims: Tuple[int, ...], eps: float,
                stats: Optional[Tuple[torch.Tensor, torch.Tensor]], layer: bool) -> torch.Tensor:
        qx = m.q(x)
        if stats is None:
            mu = m.mean(qx, dims, keepdim=True)
            xs = m.sub(qx, mu)
            var = m.mean(m.mul(xs, xs), dims, keepdim=True)
            ctx.batch_stats = (mu, var)
        else:
            xs = m.sub(qx, m.q(stats[0]))
            var = m.q(stats[1])
        ve = _var_eps(m, var, eps)
        inv = m.recip(m.sqrt(ve))
        xn = m.mul(xs, inv)
        ctx.m, ctx.dims, ctx.fixed, ctx.layer = m.for_grad(), dims, stats is not None, layer
        ctx.save_for_backward(xs, inv, xn, ve)
        return xn

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, dims, (xs, inv, xn, ve) = ctx.m, ctx.dims, ctx.saved_tensors
        g = m.q(grad)
        none = (None, None, None, None, None)
        if m.microxcaling and ctx.layer:
            return (_layer_norm_backward_microxcaling(m, g, dims, xn, ve), *none)
        dxs = m.mul(g, inv)
        if ctx.fixed and not m.microxcaling:
            return (dxs, *none)
        dmu = m.mean(-dxs, dims, keepdim=True)
        a = m.mean(m.mul(g, xs), dims, keepdim=True)
        a = m.mul(m.mul(a, m.mul(inv, inv)), inv)
        dx = m.add(m.add(dxs, m.mul(-a, xs)), dmu)
        return (dx, *none)


def _layer_norm_backward_microxcaling(m: RoundedMath, g: torch.Tensor, dims: Tuple[int, ...], xn: torch.Tensor,
                                      ve: torch.Tensor) -> torch.Tensor:
    """dx of layer norm from ``xn`` and ``ve`` (microxcaling's formulas, see the module notes)."""
    sd = m.sqrt(ve)
    dxs = m.mul(g, m.div(1.0, sd))
    a = m.mean(m.mul(m.mul(g, xn), sd), dims, keepdim=True)
    a = m.mul(a, m.div(1.0, ve))
    dx = m.add(dxs, m.mul(-a, xn))
    return m.add(dx, -m.mean(dx, dims, keepdim=True))


class _RMSNormalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, dims: Tuple[int, ...], eps: float) -> torch.Tensor:
        qx = m.q(x)
        inv = _inv_std(m, m.mean(m.mul(qx, qx), dims, keepdim=True), eps)
        xn = m.mul(qx, inv)
        ctx.m, ctx.dims = m.for_grad(), dims
        ctx.save_for_backward(xn, inv)
        return xn

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (xn, inv) = ctx.m, ctx.saved_tensors
        g = m.q(grad)
        if m.microxcaling:
            d1 = m.mul(g, inv)
            return m.sub(d1, m.mul(xn, m.mean(m.mul(d1, xn), ctx.dims, keepdim=True))), None, None, None
        a = m.mean(m.mul(g, xn), ctx.dims, keepdim=True)
        return m.mul(m.sub(g, m.mul(xn, a)), inv), None, None, None


def _affine(y: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], shape: Sequence[int],
            precision: PrecisionLike) -> torch.Tensor:
    """q(q(y * weight) + bias), weight and bias viewed as ``shape``; either may be None."""
    if weight is not None:
        y = mul(y, weight.reshape(shape), precision)
    if bias is not None:
        y = add(y, bias.reshape(shape), precision)
    return y


def _check_eps(eps: float, op: str) -> float:
    if not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"{op}: eps must be a non-negative number, got {eps!r}")
    return float(eps)


def layer_norm(x: torch.Tensor, normalized_shape: Union[int, Sequence[int]], weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5,
               precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """Layer norm over the trailing ``normalized_shape`` dims, as torch.nn.functional.layer_norm; float32 out."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise ValueError(f"layer_norm: normalized_shape {shape} does not match the input's trailing dims {tuple(x.shape)}")
    dims = tuple(range(x.dim() - len(shape), x.dim()))
    y = _Normalize.apply(x, math_for(precision), dims, _check_eps(eps, "layer_norm"), None, True)
    return _affine(y, weight, bias, shape, precision)


def rms_norm(x: torch.Tensor, normalized_shape: Union[int, Sequence[int]], weight: Optional[torch.Tensor] = None,
             eps: float = 1e-6, precision: PrecisionLike = "bfloat16",
             bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """RMS norm over the trailing ``normalized_shape`` dims: x / sqrt(mean(x**2) + eps) * weight (+ bias)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise ValueError(f"rms_norm: normalized_shape {shape} does not match the input's trailing dims {tuple(x.shape)}")
    dims = tuple(range(x.dim() - len(shape), x.dim()))
    y = _RMSNormalize.apply(x, math_for(precision), dims, _check_eps(eps, "rms_norm"))
    return _affine(y, weight, bias, shape, precision)


def _channel_shape(x: torch.Tensor) -> Tuple[int, ...]:
    """(1, C, 1, ...): the view of a per-channel parameter."""
    return (1, x.shape[1]) + (1,) * (x.dim() - 2)


def group_norm(x: torch.Tensor, num_groups: int, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5,
               precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """Group norm of (N, C, ...) input: statistics per sample over each group of C / num_groups channels."""
    if x.dim() < 2 or not isinstance(num_groups, int) or num_groups < 1 or x.shape[1] % num_groups:
        raise ValueError(f"group_norm: num_groups={num_groups!r} must divide the channel dim of an (N, C, ...) "
                         f"input, got shape {tuple(x.shape)}")
    grouped = x.reshape(x.shape[0], num_groups, -1)
    y = _Normalize.apply(grouped, math_for(precision), (2,), _check_eps(eps, "group_norm"), None, False)
    y = y.reshape(x.shape)
    return _affine(y, weight, bias, _channel_shape(x), precision)


def batch_norm(x: torch.Tensor, running_mean: Optional[torch.Tensor], running_var: Optional[torch.Tensor],
               weight: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """Batch norm of (N, C, ...) input, as torch.nn.functional.batch_norm: batch statistics when
    ``training`` (running stats, when given, updated in float32 with the rounded mean and the unbiased
    rounded variance), else the rounded running statistics."""
    if x.dim() < 2:
        raise ValueError(f"batch_norm: input must be (N, C, ...), got shape {tuple(x.shape)}")
    m, eps = math_for(precision), _check_eps(eps, "batch_norm")
    view = _channel_shape(x)
    dims = (0,) + tuple(range(2, x.dim()))
    if training:
        y, stats = _batch_stats_forward(x, m, dims, eps)
        if m.microxcaling:
            _update_running_microxcaling(m, (running_mean, running_var), (stats[0], _var_eps(m, stats[1], eps)),
                                         momentum)
        elif running_mean is not None and running_var is not None:
            n = x.numel() // x.shape[1]
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(momentum * stats[0].reshape(-1))
                running_var.mul_(1 - momentum).add_(momentum * stats[1].reshape(-1) * n / max(n - 1, 1))
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: training=False needs running_mean and running_var")
        y = _Normalize.apply(x, m, dims, eps, (running_mean.reshape(view), running_var.reshape(view)), False)
    return _affine(y, weight, bias, view, precision)


def _batch_stats_forward(x: torch.Tensor, m: RoundedMath, dims: Tuple[int, ...], eps: float):
    """(normalised x, (rounded mean, rounded biased variance)) from the batch."""
    qx = m.q(x.detach())
    mu = m.mean(qx, dims, keepdim=True)
    var = m.mean(m.mul(m.sub(qx, mu), m.sub(qx, mu)), dims, keepdim=True)
    return _Normalize.apply(x, m, dims, eps, None, False), (mu, var)


def _update_running_microxcaling(m: RoundedMath, running: Tuple[Optional[torch.Tensor], ...],
                                 batch: Tuple[torch.Tensor, torch.Tensor], momentum: float) -> None:
    """Each running buffer given: r = q(q((1 - momentum) * r) + q(momentum * s)) (module notes)."""
    with torch.no_grad():
        for buf, stat in zip(running, batch):
            if buf is not None:
                buf.copy_(m.add(m.mul(1 - momentum, buf), m.mul(momentum, stat.reshape(buf.shape))))
