"""ONNX nodes for the tensor functions and methods the model exporter supports.

Arguments arrive as :class:`Value` (a graph value) or plain Python constants, exactly as
``torch.fx`` recorded them. Arithmetic with a Python number makes a float32 constant.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence

import torch
import torch.nn.functional as F

from ..errors import ExportError
from .builder import GraphBuilder
from .torch_modules import NodeInfo, flatten_of

__all__ = ["Value", "FUNCTION_CONVERTERS", "METHOD_CONVERTERS"]


@dataclass(frozen=True)
class Value:
    """A value of the ONNX graph (the output of an earlier node or a graph input)."""

    name: str


def _operand(b: GraphBuilder, a: object, info: NodeInfo) -> str:
    if isinstance(a, Value):
        return a.name
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return b.const(float(a))
    raise ExportError(info.name, "operand", f"unsupported argument {a!r} (tensors and numbers export)")


def _binary(op: str) -> Callable:
    def convert(b: GraphBuilder, info: NodeInfo, args: Sequence[object], kwargs: Dict[str, object]) -> str:
        if kwargs.get("alpha", 1) != 1:
            raise ExportError(info.name, op, "alpha != 1 does not export")
        return b.node(op, [_operand(b, args[0], info), _operand(b, args[1], info)])
    return convert


def _unary(op: str) -> Callable:
    def convert(b: GraphBuilder, info: NodeInfo, args: Sequence[object], kwargs: Dict[str, object]) -> str:
        return b.node(op, [_operand(b, args[0], info)])  # inplace= makes no difference in a graph
    return convert


def _gelu(b: GraphBuilder, info: NodeInfo, args: Sequence[object], kwargs: Dict[str, object]) -> str:
    return b.node("Gelu", [_operand(b, args[0], info)], approximate=str(kwargs.get("approximate", "none")))


def _softmax(b: GraphBuilder, info: NodeInfo, args: Sequence[object], kwargs: Dict[str, object]) -> str:
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if not isinstance(dim, int):
        raise ExportError(info.name, "softmax", f"dim must be an int, got {dim!r}")
    return b.node("Softmax", [_operand(b, args[0], info)], axis=dim)


def _flatten(b: GraphBuilder, info: NodeInfo, args: Sequence[object], kwargs: Dict[str, object]) -> str:
    start = args[1] if len(args) > 1 else kwargs.get("start_dim", 0)
    end = args[2] if len(args) > 2 else kwargs.get("end_dim", -1)
    shape = info.in_shapes[0]
    return flatten_of(b, _operand(b, args[0], info), len(shape), int(start), int(end), shape)


def _reshape(b: GraphBuilder, info: NodeInfo, args: Sequence[object], kwargs: Dict[str, object]) -> str:
    dims: List[object] = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else list(args[1:])
    if not all(isinstance(d, int) for d in dims):
        raise ExportError(info.name, "reshape/view", f"shape {dims!r} is not all integers (x.size() does not export; "
                          "use -1 or nn.Flatten)")
    return b.node("Reshape", [_operand(b, args[0], info), b.ints(dims)], hint="reshape")


def _identity(b: GraphBuilder, info: NodeInfo, args: Sequence[object], kwargs: Dict[str, object]) -> str:
    return _operand(b, args[0], info)


_COMMON: Dict[str, Callable] = {
    "add": _binary("Add"), "sub": _binary("Sub"), "mul": _binary("Mul"), "div": _binary("Div"),
    "relu": _unary("Relu"), "sigmoid": _unary("Sigmoid"), "tanh": _unary("Tanh"), "flatten": _flatten,
    "softmax": _softmax,
}

#: ``call_function`` targets.
FUNCTION_CONVERTERS: Dict[Callable, Callable] = {
    operator.add: _COMMON["add"], operator.sub: _COMMON["sub"], operator.mul: _COMMON["mul"],
    operator.truediv: _COMMON["div"], torch.add: _COMMON["add"], torch.sub: _COMMON["sub"],
    torch.mul: _COMMON["mul"], torch.div: _COMMON["div"], torch.relu: _COMMON["relu"], F.relu: _COMMON["relu"],
    torch.sigmoid: _COMMON["sigmoid"], torch.tanh: _COMMON["tanh"], F.gelu: _gelu, torch.flatten: _flatten,
    torch.softmax: _softmax, F.softmax: _softmax, torch.reshape: _reshape,
}

#: ``call_method`` names.
METHOD_CONVERTERS: Dict[str, Callable] = {
    **_COMMON, "view": _reshape, "reshape": _reshape, "contiguous": _identity,
}
