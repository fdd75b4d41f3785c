"""The GEMM layers and functions taking ``mx_specs``: one stateless groupquant quant layer (:mod:`.recipe`) per
distinct ``mx_specs`` and weight shape, borrowing ``W`` and ``b`` at each call (``docs/compat-microxcaling.md``).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Optional, Tuple

import torch
from torch import Tensor

from ...nn import QuantMatMul
from ...nn.functional.functional_quantizers import FunctionalConv, FunctionalLinear
from . import _torch
from ._torch import native_torch
from .module_specs import calls, mx_module
from .recipe import _recipe, matmul_settings
from .specs import MxSpecs, Specs, apply_mx_specs

__all__ = ["Linear", "linear", "Conv1d", "Conv2d", "Conv3d", "conv1d", "conv2d", "conv3d", "matmul", "bmm"]

_MODES = ("aa", "aw", "wa")
_CONVS = {1: _torch.conv1d, 2: _torch.conv2d, 3: _torch.conv3d}

Key = Tuple[Tuple[str, Any], ...]


def _key(mx_specs: Mapping[str, Any]) -> Key:
    """The settings over the defaults as a hashable key (a bad value raises when the layer is built)."""
    return tuple(sorted(apply_mx_specs(mx_specs).items(), key=lambda item: item[0]))


def _per_dim(value: Any, spatial: int) -> Tuple[int, ...]:
    """A convolution setting given as one number or one per spatial dim, as ints per dim."""
    return tuple(int(v) for v in (value if isinstance(value, (tuple, list)) else (value,) * spatial))


@functools.lru_cache(maxsize=128)
def _linear_layer(key: Key, shape: Tuple[int, int], bias: bool, device: torch.device) -> FunctionalLinear:
    """The quant layer of one ``mx_specs`` for a weight of ``shape``."""
    return FunctionalLinear(shape[0], shape[1], bias, _recipe(MxSpecs(dict(key)), "mx_specs"), device=device)


@functools.lru_cache(maxsize=128)
def _conv_layer(key: Key, shape: Tuple[int, ...], bias: bool, device: torch.device, groups: int) -> FunctionalConv:
    """The quant layer of one ``mx_specs`` for a convolution weight of ``shape``."""
    return FunctionalConv(shape, bias, _recipe(MxSpecs(dict(key)), "mx_specs", gemm="conv"), groups=groups,
                          device=device, blocks_across_groups=True)


@functools.lru_cache(maxsize=128)
def _matmul_layer(key: Key, mode: str) -> QuantMatMul:
    """The QuantMatMul of one ``mx_specs`` and ``mode_config``."""
    return QuantMatMul(**matmul_settings(MxSpecs(dict(key)), mode))


def linear(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, mx_specs: Specs = None,
           prequantized_weights: bool = False, name: Optional[str] = None) -> Tensor:
    """``F.linear`` with ``mx_specs`` (plain when None); ``prequantized_weights=True`` is not provided."""
    if prequantized_weights:
        raise NotImplementedError("linear(prequantized_weights=True) is not provided by groupquant's "
                                  "microxcaling compat; quantize the weights with groupquant.pack_model instead")
    if mx_specs is None:
        return _torch.linear(input, weight, bias)
    if input.ndim == 1:  # torch's linear takes one vector and returns one
        return linear(input.unsqueeze(0), weight, bias, mx_specs=mx_specs).squeeze(0)
    layer = _linear_layer(_key(mx_specs), tuple(weight.shape), bias is not None, weight.device)
    with native_torch():
        return layer(input, weight, bias)


def _conv(x: Tensor, weight: Tensor, bias: Optional[Tensor], stride: Any, padding: Any, dilation: Any, groups: int,
          mx_specs: Specs, spatial: int) -> Tensor:
    """The convolution with ``spatial`` dims (plain when ``mx_specs`` is None); unbatched input as torch's."""
    if x.ndim == spatial + 1:
        return _conv(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups, mx_specs, spatial).squeeze(0)
    if x.ndim != spatial + 2:
        raise ValueError(f"conv{spatial}d takes a {spatial + 2}-d input (N, C, ...) or an unbatched "
                         f"{spatial + 1}-d one, got shape {tuple(x.shape)}")
    if mx_specs is None:
        return _CONVS[spatial](x, weight, bias, stride, padding, dilation, groups)
    if isinstance(padding, str):
        raise NotImplementedError(f"padding={padding!r}: give the padding as numbers with mx_specs")
    layer = _conv_layer(_key(mx_specs), tuple(weight.shape), bias is not None, weight.device, groups)
    with native_torch():
        return layer(x, weight, bias, _per_dim(stride, spatial), _per_dim(padding, spatial),
                     _per_dim(dilation, spatial))


def _conv_function(spatial: int) -> Callable[..., Tensor]:
    """``F.conv{spatial}d`` taking ``mx_specs`` and ``name`` after its arguments."""

    def conv(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: Any = 1, padding: Any = 0,
             dilation: Any = 1, groups: int = 1, mx_specs: Specs = None, name: Optional[str] = None) -> Tensor:
        return _conv(input, weight, bias, stride, padding, dilation, groups, mx_specs, spatial)

    conv.__name__ = conv.__qualname__ = f"conv{spatial}d"
    conv.__doc__ = f"``F.conv{spatial}d`` with ``mx_specs`` (plain when None)."
    return conv


conv1d, conv2d, conv3d = _conv_function(1), _conv_function(2), _conv_function(3)


def matmul(in1: Tensor, in2: Tensor, bias: Optional[Tensor] = None, mx_specs: Specs = None, name: Optional[str] = None,
           mode_config: str = "aa") -> Tensor:
    """``torch.matmul(in1, in2) (+ bias)`` with ``mx_specs`` (plain when None); ``mode_config`` ``'aw'`` / ``'wa'``:
    that side is a weight."""
    if mode_config not in _MODES:
        raise ValueError(f"matmul mode_config must be one of {_MODES}, got {mode_config!r}")
    if mx_specs is None:
        out = _torch.matmul(in1, in2)
        return out if bias is None else out + bias
    if in1.ndim == 1:  # torch.matmul's vector rules: a row vector on the left ...
        return matmul(in1.unsqueeze(0), in2, bias, mx_specs, name, mode_config).squeeze(-2)
    if in2.ndim == 1:  # ... a column vector on the right, the added dim removed from the result
        return matmul(in1, in2.unsqueeze(-1), bias, mx_specs, name, mode_config).squeeze(-1)
    layer = _matmul_layer(_key(mx_specs), mode_config)
    with native_torch():
        return layer(in1, in2, bias)


def bmm(in1: Tensor, in2: Tensor, mx_specs: Specs = None, name: Optional[str] = None) -> Tensor:
    """``torch.bmm`` with ``mx_specs`` (both sides activations; plain torch when None)."""
    if in1.ndim != 3 or in2.ndim != 3:
        raise ValueError(f"bmm takes two 3-d tensors, got shapes {tuple(in1.shape)} and {tuple(in2.shape)}")
    return matmul(in1, in2, mx_specs=mx_specs, name=name)


def _module_conv(input: Tensor, weight: Tensor, bias: Optional[Tensor], stride: Any, padding: Any, dilation: Any,
                 groups: int, padding_mode: str, mx_specs: Specs) -> Tensor:
    """A convolution module's forward (zero padding only)."""
    if padding_mode != "zeros":
        raise NotImplementedError(f"padding_mode={padding_mode!r} with mx_specs; use 'zeros'")
    return _conv(input, weight, bias, stride, padding, dilation, groups, mx_specs, weight.ndim - 2)


Linear = mx_module(torch.nn.Linear, 3, calls(linear, "weight", "bias"))
_CONV_ATTRS = ("weight", "bias", "stride", "padding", "dilation", "groups", "padding_mode")
Conv1d, Conv2d, Conv3d = (mx_module(base, 9, calls(_module_conv, *_CONV_ATTRS))
                          for base in (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d))
