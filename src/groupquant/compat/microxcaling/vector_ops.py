"""The element-wise ops taking ``mx_specs`` (``None``: plain torch): each is the :mod:`groupquant.elementwise` op
of its name run with the rounding kit of ``mx_specs``, in the input's dtype (``docs/compat-microxcaling.md``).
"""
from __future__ import annotations

import math
import operator
import warnings
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ... import elementwise as ew
from . import _torch
from .mapping import rounded, rounding_kit
from .module_specs import MxSpecsMixin, calls, mx_module
from .specs import Specs, apply_mx_specs

__all__ = ["sigmoid", "tanh", "relu", "relu6", "leaky_relu", "silu", "gelu", "softmax", "Sigmoid", "Tanh", "ReLU",
           "ReLU6", "LeakyReLU", "SiLU", "GELU", "Softmax", "layer_norm", "group_norm", "batch_norm", "LayerNorm",
           "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "simd_add", "simd_sub", "simd_mul",
           "simd_div", "simd_split", "simd_square", "simd_sqrt", "simd_exp", "simd_log", "simd_reduce_sum",
           "simd_reduce_mean", "simd_norm"]

Operand = Union[Tensor, float]
Dims = Union[int, Sequence[int], None]


def sigmoid(input: Tensor, mx_specs: Specs = None, name: Optional[str] = None) -> Tensor:
    """``torch.sigmoid`` with ``mx_specs``."""
    return _torch.sigmoid(input) if mx_specs is None else rounded(ew.sigmoid, input, mx_specs)


def tanh(input: Tensor, mx_specs: Specs = None, name: Optional[str] = None) -> Tensor:
    """``torch.tanh`` with ``mx_specs``."""
    return _torch.tanh(input) if mx_specs is None else rounded(ew.tanh, input, mx_specs)


def _inplace_activation(op: str) -> Callable[..., Tensor]:
    """``F.<op>(input, inplace=False, mx_specs=None, name=None)`` with ``mx_specs``."""
    plain = getattr(_torch, op)

    def activation(input: Tensor, inplace: bool = False, mx_specs: Specs = None, name: Optional[str] = None) -> Tensor:
        return plain(input, inplace=inplace) if mx_specs is None else rounded(getattr(ew, op), input, mx_specs)

    activation.__name__ = activation.__qualname__ = op
    activation.__doc__ = f"``F.{op}`` with ``mx_specs``."
    return activation


relu, relu6, silu = _inplace_activation("relu"), _inplace_activation("relu6"), _inplace_activation("silu")


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False, mx_specs: Specs = None,
               name: Optional[str] = None) -> Tensor:
    """``F.leaky_relu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.leaky_relu(input, negative_slope, inplace=inplace)
    return rounded(ew.leaky_relu, input, mx_specs, negative_slope=float(negative_slope))


def gelu(input: Tensor, mx_specs: Specs = None, first_order_gelu: bool = False, approximate: Any = None,
         name: Optional[str] = None) -> Tensor:
    """microxcaling's GELU (plain: torch's tanh GELU, unless ``first_order_gelu``)."""
    if mx_specs is None and not first_order_gelu:
        return _torch.gelu(input, approximate="tanh")
    return rounded(ew.gelu, input, mx_specs, approximate="quick" if first_order_gelu else "sigmoid")


def softmax(input: Tensor, dim: Optional[int] = -1, mx_specs: Specs = None, name: Optional[str] = None) -> Tensor:
    """``F.softmax`` with ``mx_specs``; ``dim=None`` is torch's implicit dim, with torch's warning."""
    if mx_specs is None:
        return _torch.softmax(input, dim=dim)
    if dim is None:
        warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the call to include dim=X "
                      "as an argument.", UserWarning, stacklevel=2)
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return rounded(ew.softmax, input, mx_specs, dim, base2=bool(apply_mx_specs(mx_specs)["softmax_exp2"]))


def layer_norm(input: Tensor, normalized_shape: Any, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-12, mx_specs: Specs = None, name: Optional[str] = None) -> Tensor:
    """``F.layer_norm`` over the last dim with ``mx_specs``."""
    if mx_specs is None:
        return _torch.layer_norm(input, normalized_shape, weight, bias, eps)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) != 1 or shape[0] != input.shape[-1]:
        raise NotImplementedError(f"layer_norm with mx_specs normalizes the last dim only; got normalized_shape="
                                  f"{normalized_shape!r} for an input of shape {tuple(input.shape)}")
    return rounded(ew.layer_norm, input, mx_specs, shape, weight, bias, eps)


def group_norm(x: Tensor, num_groups: int, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-5, mx_specs: Specs = None) -> Tensor:
    """``F.group_norm`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.group_norm(x, num_groups, weight, bias, eps)
    return rounded(ew.group_norm, x, mx_specs, num_groups, weight, bias, eps)


def batch_norm(x: Tensor, running_mean: Optional[Tensor], running_var: Optional[Tensor],
               weight: Optional[Tensor] = None, bias: Optional[Tensor] = None, is_training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5, mx_specs: Specs = None) -> Tensor:
    """``F.batch_norm`` with ``mx_specs`` (running statistics updated in microxcaling's rounded order)."""
    if mx_specs is None:
        return _torch.batch_norm(x, running_mean, running_var, weight, bias, is_training, momentum, eps)
    if not is_training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm(is_training=False) needs running_mean and running_var")
    return rounded(ew.batch_norm, x, mx_specs, running_mean, running_var, weight, bias, is_training, momentum, eps)


class GELU(MxSpecsMixin, torch.nn.GELU):
    """``torch.nn.GELU`` taking ``mx_specs`` (microxcaling's form; ``approximate`` ignored)."""

    def __init__(self, mx_specs: Specs = None, first_order_gelu: bool = False, approximate: Any = None,
                 name: Optional[str] = None) -> None:
        super().__init__(approximate="tanh")
        self.first_order_gelu = first_order_gelu
        self._init_mx(mx_specs, name)

    def forward(self, input: Tensor) -> Tensor:
        return gelu(input, mx_specs=self.specs_or_none(), first_order_gelu=self.first_order_gelu)


class LayerNorm(MxSpecsMixin, torch.nn.LayerNorm):
    """``torch.nn.LayerNorm(hidden_size, eps=1e-12)`` taking ``mx_specs`` (microxcaling's signature)."""

    def __init__(self, hidden_size: Any, eps: float = 1e-12, mx_specs: Specs = None, name: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(hidden_size, eps=eps, **kwargs)
        self._init_mx(mx_specs, name)

    forward = calls(layer_norm, "normalized_shape", "weight", "bias", "eps")


class RMSNorm(LayerNorm):
    """microxcaling's RMSNorm: a LayerNorm without the mean; ``mx_specs`` None is the defaults, as there."""

    def forward(self, x: Tensor) -> Tensor:
        return rounded(ew.rms_norm, x, self.mx_specs, self.normalized_shape, self.weight, self.eps, bias=self.bias)


def _batch_norm_forward(self: Any, x: Tensor) -> Tensor:
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


Sigmoid = mx_module(torch.nn.Sigmoid, 0, calls(sigmoid))
Tanh = mx_module(torch.nn.Tanh, 0, calls(tanh))
ReLU = mx_module(torch.nn.ReLU, 1, calls(relu, "inplace"))
ReLU6 = mx_module(torch.nn.ReLU6, 1, calls(relu6, "inplace"))
LeakyReLU = mx_module(torch.nn.LeakyReLU, 2, calls(leaky_relu, "negative_slope", "inplace"))
SiLU = mx_module(torch.nn.SiLU, 1, calls(silu, "inplace"))
Softmax = mx_module(torch.nn.Softmax, 1, calls(softmax, "dim"))
GroupNorm = mx_module(torch.nn.GroupNorm, 2, calls(group_norm, "num_groups", "weight", "bias", "eps"))
BatchNorm1d, BatchNorm2d, BatchNorm3d = (mx_module(base, 1, _batch_norm_forward)
                                         for base in (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d))


def _simd_binary(op: str, symbol: str, note: str = "") -> Callable[..., Tensor]:
    """``simd_<op>(in1, in2, mx_specs=None)``: ``in1 <symbol> in2`` rounded, operands too."""
    plain = getattr(operator, "truediv" if op == "div" else op)

    def simd(in1: Tensor, in2: Operand, mx_specs: Specs = None) -> Tensor:
        if mx_specs is None:
            return plain(in1, in2)
        if not isinstance(in1, Tensor):
            raise TypeError(f"simd_{op}: the first operand must be a tensor, got {type(in1).__name__}")
        return getattr(ew, op)(in1, in2, precision=rounding_kit(mx_specs))

    simd.__name__ = simd.__qualname__ = f"simd_{op}"
    simd.__doc__ = f"``in1 {symbol} in2`` rounded (operands too{note})."
    return simd


simd_add, simd_sub, simd_mul = _simd_binary("add", "+"), _simd_binary("sub", "-"), _simd_binary("mul", "*")
simd_div = _simd_binary("div", "/", "; ``vec_use_recip`` multiplies by the rounded reciprocal")


def _simd_unary(op: str, formula: str) -> Callable[..., Tensor]:
    """``simd_<op>(in1, mx_specs=None)``: ``formula`` of ``in1`` rounded."""
    plain = {"square": lambda x: x * x, "sqrt": _torch.sqrt, "exp": _torch.exp, "log": _torch.log}[op]

    def simd(in1: Tensor, mx_specs: Specs = None) -> Tensor:
        if mx_specs is None:
            return plain(in1)
        kit = rounding_kit(mx_specs)
        out = ew.pow(in1, 2.0, precision=kit) if op == "square" else getattr(ew, op)(in1, precision=kit)
        return out if op == "sqrt" else out.to(in1.dtype)  # (sqrt in float32, as microxcaling's)

    simd.__name__ = simd.__qualname__ = f"simd_{op}"
    simd.__doc__ = f"``{formula}`` rounded."
    return simd


simd_square, simd_sqrt = _simd_unary("square", "in1 ** 2"), _simd_unary("sqrt", "sqrt(in1)")
simd_exp, simd_log = _simd_unary("exp", "e**in1 (vec_use_exp2: through 2**x)"), _simd_unary("log", "log(in1)")


def _dims(x: Tensor, dim: Dims) -> List[int]:
    """The dims of a reduction (all of ``x``'s when ``dim`` is None)."""
    if dim is None:
        return list(range(x.ndim))
    return [dim] if isinstance(dim, int) else list(dim)


def simd_reduce_sum(in1: Tensor, dim: Dims = None, keepdim: bool = False, mx_specs: Specs = None) -> Tensor:
    """``in1.sum(dim)`` of the rounded input, rounded (all dims when ``dim`` is None)."""
    dims = _dims(in1, dim)
    if mx_specs is None:
        return in1.sum(dims, keepdim=keepdim)
    return ew.sum(in1, dims, keepdim, precision=rounding_kit(mx_specs)).to(in1.dtype)


def simd_reduce_mean(in1: Tensor, dim: Dims = None, keepdim: bool = False, mx_specs: Specs = None) -> Tensor:
    """The rounded sum times ``1 / n``, rounded (as microxcaling: a multiply, not a divide)."""
    dims = _dims(in1, dim)
    if mx_specs is None:
        return in1.mean(dims, keepdim=keepdim)
    n = math.prod(in1.shape[d] for d in dims)
    return simd_mul(simd_reduce_sum(in1, dims, keepdim, mx_specs), 1.0 / n, mx_specs)


def simd_norm(in1: Tensor, keepdim: bool = False, mx_specs: Specs = None) -> Tensor:
    """Frobenius norm ``sqrt(sum(square(x)))``, each step rounded."""
    if mx_specs is None:
        return torch.linalg.norm(in1, keepdim=keepdim)
    return simd_sqrt(simd_reduce_sum(simd_square(in1, mx_specs), None, keepdim, mx_specs), mx_specs)


def simd_split(in1: Tensor, mx_specs: Specs = None) -> Tuple[Tensor, Tensor]:
    """Two uses of ``in1`` whose gradients are added (rounded)."""
    if mx_specs is None:
        return in1, in1
    return ew.split(in1, precision=rounding_kit(mx_specs))
