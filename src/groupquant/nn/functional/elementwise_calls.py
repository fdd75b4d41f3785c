"""The element-wise torch calls a functional-quantization mode runs in a recipe's element-wise
precision (``Recipe.elementwise``, e.g. ``"bfloat16"``): each maps onto an op of
:mod:`groupquant.elementwise` (every basic operation rounded, forward and backward).

Mapped: ``softmax`` (``F`` / ``torch`` / ``Tensor``), ``F.gelu`` (erf and tanh forms), ``F.silu``,
``sigmoid``, ``tanh``, ``relu``, ``F.layer_norm``, ``F.rms_norm``, ``F.group_norm``, and the adds and
multiplies of two floating tensors of one shape (residual adds, gates). Results come back in the
input's dtype (softmax: in its ``dtype`` argument's, positional or keyword, as torch); ``inplace=True``
(``F.relu``, ``F.silu``) and the ``relu_`` / ``sigmoid_`` / ``tanh_`` forms write into the input.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import torch
import torch.nn.functional as F

from ... import elementwise as ew

__all__ = ["elementwise_handler"]


def _softmax_in(precision: Any, x: torch.Tensor, dim: Optional[int], dtype: Optional[torch.dtype]) -> torch.Tensor:
    """torch's softmax rule: ``x`` cast to ``dtype`` (when given) first; the result in that dtype."""
    if dim is None:
        raise ValueError("softmax needs an explicit dim under element-wise precision emulation")
    if dtype is not None:
        x = x.to(dtype)
    return ew.softmax(x, dim, precision).to(x.dtype)


def _functional_softmax(precision: Any, x: torch.Tensor, dim: Optional[int] = None, _stacklevel: int = 3,
                        dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``F.softmax(input, dim, _stacklevel, dtype)``."""
    return _softmax_in(precision, x, dim, dtype)


def _torch_softmax(precision: Any, x: torch.Tensor, dim: Optional[int] = None,
                   dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``torch.softmax(input, dim, dtype)`` and ``Tensor.softmax(dim, dtype)`` (dtype positional or keyword)."""
    return _softmax_in(precision, x, dim, dtype)


def _unary(op: Callable) -> Callable:
    def call(precision: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return op(x, precision=precision).to(x.dtype)
    return call


def _in_place(op: Callable) -> Callable:
    """``torch.relu_`` / ``Tensor.sigmoid_`` ...: the rounded result written into ``x``, which is returned."""
    def call(precision: Any, x: torch.Tensor) -> torch.Tensor:
        return x.copy_(op(x, precision=precision))
    return call


def _with_inplace(op: Callable) -> Callable:
    """``F.relu(x, inplace)`` / ``F.silu(x, inplace)``: in place when asked, as torch."""
    def call(precision: Any, x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        out = op(x, precision=precision)
        return x.copy_(out) if inplace else out.to(x.dtype)
    return call


def _gelu(precision: Any, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return ew.gelu(x, approximate, precision).to(x.dtype)


def _layer_norm(precision: Any, x: torch.Tensor, normalized_shape: Any, weight: Any = None, bias: Any = None,
                eps: float = 1e-5) -> torch.Tensor:
    return ew.layer_norm(x, normalized_shape, weight, bias, eps, precision=precision).to(x.dtype)


def _rms_norm(precision: Any, x: torch.Tensor, normalized_shape: Any, weight: Any = None,
              eps: Optional[float] = None) -> torch.Tensor:
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    return ew.rms_norm(x, normalized_shape, weight, eps, precision=precision).to(x.dtype)


def _group_norm(precision: Any, x: torch.Tensor, num_groups: int, weight: Any = None, bias: Any = None,
                eps: float = 1e-5) -> torch.Tensor:
    return ew.group_norm(x, num_groups, weight, bias, eps, precision=precision).to(x.dtype)


def _binary(op: Callable) -> Callable:
    def call(precision: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not _same_shape_floats(a, b):
            return NotImplemented
        return op(a, b, precision).to(a.dtype)
    return call


def _same_shape_floats(a: Any, b: Any) -> bool:
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.is_floating_point()
            and b.is_floating_point() and a.shape == b.shape and a.dtype == b.dtype)


_HANDLERS: Dict[Callable, Callable] = {
    F.softmax: _functional_softmax, torch.softmax: _torch_softmax, torch.Tensor.softmax: _torch_softmax,
    F.gelu: _gelu, F.silu: _with_inplace(ew.silu), F.sigmoid: _unary(ew.sigmoid), torch.sigmoid: _unary(ew.sigmoid),
    torch.Tensor.sigmoid: _unary(ew.sigmoid), F.tanh: _unary(ew.tanh), torch.tanh: _unary(ew.tanh),
    torch.Tensor.tanh: _unary(ew.tanh), F.relu: _with_inplace(ew.relu), torch.relu: _unary(ew.relu),
    torch.Tensor.relu: _unary(ew.relu), F.layer_norm: _layer_norm, F.group_norm: _group_norm,
    torch.relu_: _in_place(ew.relu), torch.Tensor.relu_: _in_place(ew.relu), torch.sigmoid_: _in_place(ew.sigmoid),
    torch.Tensor.sigmoid_: _in_place(ew.sigmoid), torch.tanh_: _in_place(ew.tanh),
    torch.Tensor.tanh_: _in_place(ew.tanh),
    torch.add: _binary(ew.add), torch.Tensor.add: _binary(ew.add), torch.Tensor.__add__: _binary(ew.add),
    torch.mul: _binary(ew.mul), torch.Tensor.mul: _binary(ew.mul), torch.Tensor.__mul__: _binary(ew.mul),
}
if hasattr(F, "rms_norm"):
    _HANDLERS[F.rms_norm] = _rms_norm


def elementwise_handler(func: Callable) -> Optional[Callable]:
    """The handler ``(precision, *args, **kwargs) -> result | NotImplemented`` of ``func``, or None."""
    return _HANDLERS.get(func)
