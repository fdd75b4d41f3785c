"""ONNX nodes for the float ``torch.nn`` modules the model exporter supports.

Each converter takes the builder, the module, a :class:`NodeInfo` (name and static shapes) and
its input value names, and returns the output value name. Weights become float32 initializers.
The model is exported in eval mode: Dropout is the identity, BatchNorm uses its running stats.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Type

import numpy as np
import torch
from torch import nn

from ..errors import ExportError
from .builder import GraphBuilder

__all__ = ["NodeInfo", "MODULE_CONVERTERS", "float_array", "linear_of", "conv_of", "flatten_of"]


@dataclass(frozen=True)
class NodeInfo:
    """What a converter knows about its node: a name (module path or op, for names and errors)
    and the static shapes seen while tracing with the example inputs."""

    name: str
    in_shapes: Tuple[Optional[torch.Size], ...]
    out_shape: Optional[torch.Size]


def float_array(t: torch.Tensor, where: str) -> np.ndarray:
    """A parameter as a float32 numpy array; other dtypes are refused (export runs in float32)."""
    if t.dtype != torch.float32:
        raise ExportError(where, "parameter", f"has dtype {t.dtype}; export a float32 model (model.float())")
    return t.detach().cpu().numpy()


def linear_of(b: GraphBuilder, x: str, weight: str, bias: Optional[str], hint: str) -> str:
    """``x @ weight.T + bias`` for a weight value ``[O, I]`` (any rank of ``x``)."""
    y = b.node("MatMul", [x, b.node("Transpose", [weight], hint=f"{hint}_wt", perm=[1, 0])], hint=hint)
    return b.node("Add", [y, bias], hint=hint) if bias is not None else y


def _pair(v, n: int) -> List[int]:
    return list(v) if isinstance(v, (tuple, list)) else [int(v)] * n


def conv_of(b: GraphBuilder, x: str, weight: str, bias: Optional[str], conv: nn.Module, info: NodeInfo) -> str:
    """ONNX ``Conv`` with the settings of a torch ``Conv1d``/``Conv2d`` (zeros padding only)."""
    n = len(conv.kernel_size)
    if conv.padding_mode != "zeros":
        raise ExportError(info.name, type(conv).__name__, f"padding_mode={conv.padding_mode!r}; only 'zeros' exports")
    dilation = _pair(conv.dilation, n)
    if conv.padding == "valid":
        begin = end = [0] * n
    elif conv.padding == "same":
        total = [d * (k - 1) for d, k in zip(dilation, conv.kernel_size)]
        begin = [t // 2 for t in total]
        end = [t - t // 2 for t in total]
    else:
        begin = end = _pair(conv.padding, n)
    inputs = [x, weight] + ([bias] if bias is not None else [])
    return b.node("Conv", inputs, hint=info.name.replace(".", "_") or "conv", kernel_shape=list(conv.kernel_size),
                  strides=_pair(conv.stride, n), pads=begin + end, dilations=dilation, group=conv.groups)


def _linear(b: GraphBuilder, m: nn.Linear, info: NodeInfo, inputs: List[str]) -> str:
    w = b.const(float_array(m.weight, info.name), hint="weight")
    bias = b.const(float_array(m.bias, info.name), hint="bias") if m.bias is not None else None
    return linear_of(b, inputs[0], w, bias, hint="linear")


def _conv(b: GraphBuilder, m: nn.Module, info: NodeInfo, inputs: List[str]) -> str:
    w = b.const(float_array(m.weight, info.name), hint="weight")
    bias = b.const(float_array(m.bias, info.name), hint="bias") if m.bias is not None else None
    return conv_of(b, inputs[0], w, bias, m, info)


def _unary(op: str, **attrs: object) -> Callable:
    def convert(b: GraphBuilder, m: nn.Module, info: NodeInfo, inputs: List[str]) -> str:
        return b.node(op, [inputs[0]], **attrs)
    return convert


def _identity(b: GraphBuilder, m: nn.Module, info: NodeInfo, inputs: List[str]) -> str:
    return inputs[0]


def _gelu(b: GraphBuilder, m: nn.GELU, info: NodeInfo, inputs: List[str]) -> str:
    return b.node("Gelu", [inputs[0]], approximate=m.approximate)


def _silu(b: GraphBuilder, m: nn.Module, info: NodeInfo, inputs: List[str]) -> str:
    return b.node("Mul", [inputs[0], b.node("Sigmoid", [inputs[0]])], hint="silu")


def _softmax(b: GraphBuilder, m: nn.Softmax, info: NodeInfo, inputs: List[str]) -> str:
    if m.dim is None:
        raise ExportError(info.name, "Softmax", "dim=None is ambiguous; give the dim")
    return b.node("Softmax", [inputs[0]], axis=int(m.dim))


def flatten_of(b: GraphBuilder, x: str, rank: int, start: int, end: int, shape: Sequence[int]) -> str:
    """torch.flatten(x, start, end) by Reshape: dims before ``start`` are copied (batch may vary)."""
    start, end = start % rank, end % rank
    target = [0] * start + [-1] + [int(s) for s in shape[end + 1:]]
    return b.node("Reshape", [x, b.ints(target)], hint="flatten")


def _flatten(b: GraphBuilder, m: nn.Flatten, info: NodeInfo, inputs: List[str]) -> str:
    shape = info.in_shapes[0]
    return flatten_of(b, inputs[0], len(shape), m.start_dim, m.end_dim, shape)


def _pool_attrs(m: nn.Module) -> Dict[str, object]:
    k = _pair(m.kernel_size, 2)
    stride = _pair(m.stride if m.stride is not None else m.kernel_size, 2)
    pad = _pair(m.padding, 2)
    return {"kernel_shape": k, "strides": stride, "pads": pad + pad, "ceil_mode": int(m.ceil_mode)}


def _maxpool(b: GraphBuilder, m: nn.MaxPool2d, info: NodeInfo, inputs: List[str]) -> str:
    if m.return_indices:
        raise ExportError(info.name, "MaxPool2d", "return_indices=True does not export")
    return b.node("MaxPool", [inputs[0]], dilations=_pair(m.dilation, 2), **_pool_attrs(m))


def _avgpool(b: GraphBuilder, m: nn.AvgPool2d, info: NodeInfo, inputs: List[str]) -> str:
    if m.divisor_override is not None:
        raise ExportError(info.name, "AvgPool2d", "divisor_override does not export")
    return b.node("AveragePool", [inputs[0]], count_include_pad=int(m.count_include_pad), **_pool_attrs(m))


def _adaptive_avgpool(b: GraphBuilder, m: nn.AdaptiveAvgPool2d, info: NodeInfo, inputs: List[str]) -> str:
    if _pair(m.output_size, 2) != [1, 1]:
        raise ExportError(info.name, "AdaptiveAvgPool2d", f"output_size={m.output_size}; only 1 (global) exports")
    return b.node("GlobalAveragePool", [inputs[0]])


def _batchnorm(b: GraphBuilder, m: nn.modules.batchnorm._BatchNorm, info: NodeInfo, inputs: List[str]) -> str:
    if m.running_mean is None:
        raise ExportError(info.name, type(m).__name__, "track_running_stats=False does not export")
    c = m.num_features
    weight = m.weight if m.weight is not None else torch.ones(c)
    bias = m.bias if m.bias is not None else torch.zeros(c)
    args = [b.const(float_array(t, info.name), hint="bn") for t in (weight, bias, m.running_mean, m.running_var)]
    return b.node("BatchNormalization", [inputs[0]] + args, epsilon=float(m.eps))


def _layernorm(b: GraphBuilder, m: nn.LayerNorm, info: NodeInfo, inputs: List[str]) -> str:
    shape = tuple(m.normalized_shape)
    weight = m.weight if m.weight is not None else torch.ones(shape)
    args = [inputs[0], b.const(float_array(weight, info.name), hint="ln")]
    if m.bias is not None:
        args.append(b.const(float_array(m.bias, info.name), hint="ln"))
    return b.node("LayerNormalization", args, axis=-len(shape), epsilon=float(m.eps))


#: Float torch modules the model exporter maps, by exact type.
MODULE_CONVERTERS: Dict[Type[nn.Module], Callable] = {
    nn.Linear: _linear, nn.Conv1d: _conv, nn.Conv2d: _conv,
    nn.ReLU: _unary("Relu"), nn.Sigmoid: _unary("Sigmoid"), nn.Tanh: _unary("Tanh"), nn.GELU: _gelu,
    nn.SiLU: _silu, nn.Softmax: _softmax, nn.Flatten: _flatten, nn.Identity: _identity, nn.Dropout: _identity,
    nn.MaxPool2d: _maxpool, nn.AvgPool2d: _avgpool, nn.AdaptiveAvgPool2d: _adaptive_avgpool,
    nn.BatchNorm1d: _batchnorm, nn.BatchNorm2d: _batchnorm, nn.LayerNorm: _layernorm,
}
