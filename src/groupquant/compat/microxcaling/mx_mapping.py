"""``inject_pyt_ops(mx_specs)``: replace torch's layers and functions globally, as microxcaling does, with the
compat ones bound to ``mx_specs``; :func:`restore_pyt_ops` or the nesting :func:`injected_pyt_ops` undo it.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _torch
from .gemm import Conv1d, Conv2d, Conv3d, Linear, bmm, conv1d, conv2d, conv3d, linear, matmul
from .specs import Specs
from .vector_ops import (GELU, BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm, LeakyReLU, ReLU, ReLU6,
                         SiLU, Sigmoid, Softmax, Tanh, batch_norm, gelu, group_norm, layer_norm, leaky_relu, relu,
                         relu6, sigmoid, silu, simd_add, simd_div, simd_exp, simd_log, simd_mul, simd_norm,
                         simd_reduce_mean, simd_reduce_sum, simd_square, simd_sub, softmax, tanh)

__all__ = ["inject_pyt_ops", "restore_pyt_ops", "injected_pyt_ops", "MODULE_MAPPING", "FUNCTION_MAPPING"]

#: the torch.nn classes injection replaces, each by the compat class of its name
MODULE_MAPPING: Dict[str, type] = {cls.__name__: cls for cls in (
    BatchNorm1d, BatchNorm2d, BatchNorm3d, Conv1d, Conv2d, Conv3d, GELU, GroupNorm, LayerNorm, LeakyReLU, Linear, ReLU,
    ReLU6, SiLU, Sigmoid, Softmax, Tanh)}


def _addmm(bias: Tensor, in1: Tensor, in2: Tensor, mx_specs: Specs = None, name: Optional[str] = None) -> Tensor:
    """``torch.addmm(bias, a, b)`` as ``matmul(a, b, bias)``."""
    return matmul(in1, in2, bias=bias, mx_specs=mx_specs, name=name)


#: the torch / F functions injection replaces (by name), and their compat functions
FUNCTION_MAPPING: Dict[str, Callable[..., Any]] = {
    **{fn.__name__: fn for fn in (batch_norm, conv1d, conv2d, conv3d, gelu, group_norm, layer_norm, leaky_relu, linear,
                                  relu, relu6, sigmoid, silu, softmax, tanh)},
    "add": simd_add, "sub": simd_sub, "mul": simd_mul, "div": simd_div,
    "exp": simd_exp, "log": simd_log, "sum": simd_reduce_sum, "mean": simd_reduce_mean, "norm": simd_norm,
    "square": simd_square, "matmul": matmul, "mm": matmul, "addmm": _addmm, "bmm": bmm,
}

# (namespace dict, name, original) of every replaced entry, for restore_pyt_ops
_SAVED: List[Tuple[Dict[str, Any], str, Any]] = []
# the mx_specs of the injection in force (None: torch's own entries), for nested injected_pyt_ops
_ACTIVE: List[Any] = [None]


def _wrap(compat: Callable[..., Any], original: Callable[..., Any], mx_specs: Any) -> Callable[..., Any]:
    """``compat(..., mx_specs=mx_specs)``, or ``original`` inside groupquant or for arguments ``compat`` does not
    take (a ``dtype`` keyword casts the result)."""
    signature = inspect.signature(compat)

    @functools.wraps(original)
    def injected(*args: Any, **kwargs: Any) -> Any:
        if _torch.in_native_torch():
            return original(*args, **kwargs)
        dtype = kwargs.pop("dtype", None)
        try:
            signature.bind(*args, mx_specs=mx_specs, **kwargs)
        except TypeError:
            if dtype is not None:
                kwargs["dtype"] = dtype
            return original(*args, **kwargs)
        out = compat(*args, mx_specs=mx_specs, **kwargs)
        return out if dtype is None else out.to(dtype)

    injected.__groupquant_injected__ = True  # type: ignore[attr-defined]
    return injected


def _module_class(cls: type, mx_specs: Any) -> type:
    """A subclass of ``cls`` whose constructor passes ``mx_specs`` unless given."""
    init = functools.partialmethod(cls.__init__, mx_specs=mx_specs)
    return type(f"{cls.__name__}_inj", (cls,), {"__init__": init, "__module__": cls.__module__})


def _replace(namespace: Dict[str, Any], name: str, value: Any) -> None:
    _SAVED.append((namespace, name, namespace[name]))
    namespace[name] = value


def inject_pyt_ops(mx_specs: Any) -> None:
    """Replace torch's layers and functions with the compat ones bound to ``mx_specs`` (replacing, not stacking)."""
    restore_pyt_ops()
    _ACTIVE[0] = mx_specs
    originals = {"torch": torch.__dict__, "F": F.__dict__}
    for name, fn in FUNCTION_MAPPING.items():
        for namespace in originals.values():
            if name in namespace:
                _replace(namespace, name, _wrap(fn, namespace[name], mx_specs))
    for name, cls in MODULE_MAPPING.items():
        _replace(torch.nn.__dict__, name, _module_class(cls, mx_specs))


def restore_pyt_ops() -> None:
    """Put back every entry :func:`inject_pyt_ops` replaced (no-op when nothing is injected)."""
    while _SAVED:
        namespace, name, original = _SAVED.pop()
        namespace[name] = original
    _ACTIVE[0] = None


@contextlib.contextmanager
def injected_pyt_ops(mx_specs: Any) -> Iterator[None]:
    """Inject ``mx_specs`` within; on the way out put back what was in force (torch's, or the outer block's)."""
    outer = _ACTIVE[0]
    inject_pyt_ops(mx_specs)
    try:
        yield
    finally:
        restore_pyt_ops()
        if outer is not None:
            inject_pyt_ops(outer)
