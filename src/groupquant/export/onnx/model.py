"""Whole-model ONNX export: trace with ``torch.fx``, map every node to ONNX nodes, check, save.

The model is traced symbolically (``torch.fx``), with groupquant's quantized layers and the
supported ``torch.nn`` modules kept as leaves; shapes come from running the example inputs
through the traced graph. Every node is then mapped by a converter (quantized layers:
:mod:`.quant_layers`; float modules: :mod:`.torch_modules`; functions and methods:
:mod:`.torch_functions`). Anything else raises :class:`ExportError` naming the layer or op.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

import onnx
import torch
import torch.fx as fx
from onnx import TensorProto, helper
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from ..errors import ExportError
from .builder import GraphBuilder, check_opset
from .quant_layers import QuantLayerOptions, find_quant_converter
from .torch_functions import FUNCTION_CONVERTERS, METHOD_CONVERTERS, Value
from .torch_modules import MODULE_CONVERTERS, NodeInfo, float_array
from .weight import E8M0_MIN_OPSET

__all__ = ["export_onnx"]


class _Tracer(fx.Tracer):
    """Keeps quantized layers and mapped torch modules as leaves; user modules are traced through."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return _is_leaf(m) or super().is_leaf_module(m, qualname)


def _example_tuple(example_inputs: Union[torch.Tensor, Sequence[torch.Tensor]]) -> Tuple[torch.Tensor, ...]:
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise TypeError(f"example_inputs[{i}] must be a float32 tensor, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
    return inputs


def _is_leaf(m: nn.Module) -> bool:
    return find_quant_converter(m) is not None or type(m) in MODULE_CONVERTERS


def _check_float32(model: nn.Module) -> None:
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise ExportError(name, "parameter", f"has dtype {p.dtype}; export a float32 model (model.float())")


def _trace(model: nn.Module, inputs: Tuple[torch.Tensor, ...]) -> fx.GraphModule:
    if _is_leaf(model):
        model = nn.Sequential(model)  # a single layer is traced as a one-layer model (its path becomes '0')
    try:
        graph = _Tracer().trace(model)
    except Exception as e:  # fx raises many kinds (TraceError, TypeError, ...) for data-dependent code
        raise ExportError(type(model).__name__, "torch.fx trace", f"the model does not trace symbolically: {e}") from e
    gm = fx.GraphModule(model, graph)
    ShapeProp(gm).propagate(*inputs)
    return gm


def _shape(arg: object) -> Optional[torch.Size]:
    meta = getattr(arg, "meta", {}).get("tensor_meta") if isinstance(arg, fx.Node) else None
    return getattr(meta, "shape", None)


def _where(node: fx.Node) -> str:
    """The module path a node came from (for messages), else the node's name."""
    stack = node.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1]
        path = path[0] if isinstance(path, tuple) else path
        return f"{path}: {node.name}"
    return node.name


def _value_info(name: str, shape: torch.Size, dynamic_batch: bool) -> onnx.ValueInfoProto:
    dims: List[Union[int, str]] = list(shape)
    if dynamic_batch and dims:
        dims[0] = "batch"
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


class _Converter:
    """Walks the traced graph once, emitting ONNX nodes into a builder."""

    def __init__(self, gm: fx.GraphModule, b: GraphBuilder, options: QuantLayerOptions) -> None:
        self.gm, self.b, self.options = gm, b, options
        self.values: Dict[fx.Node, str] = {}

    def arg(self, a: object) -> object:
        if isinstance(a, fx.Node):
            return Value(self.values[a])
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def info(self, node: fx.Node, name: str) -> NodeInfo:
        shapes = tuple(_shape(a) for a in node.args if isinstance(a, fx.Node))
        return NodeInfo(name, shapes, _shape(node))

    def module(self, node: fx.Node) -> str:
        m = self.gm.get_submodule(node.target)
        info = self.info(node, str(node.target))
        inputs = [self.values[a] for a in node.args if isinstance(a, fx.Node)]
        if len(inputs) != len(node.args) or node.kwargs:
            raise ExportError(info.name, type(m).__name__, "only modules called with tensor arguments export")
        quant = find_quant_converter(m)
        if quant is not None:
            return quant(self.b, m, info, inputs, self.options)
        convert = MODULE_CONVERTERS.get(type(m))
        if convert is None:
            raise ExportError(info.name, type(m).__name__, "no ONNX mapping for this layer; supported: groupquant "
                              "Quant* layers and " + ", ".join(sorted(t.__name__ for t in MODULE_CONVERTERS)))
        return convert(self.b, m, info, inputs)

    def call(self, node: fx.Node) -> str:
        table = FUNCTION_CONVERTERS if node.op == "call_function" else METHOD_CONVERTERS
        convert = table.get(node.target)
        label = getattr(node.target, "__name__", str(node.target))
        if convert is None:
            raise ExportError(_where(node), f"{node.op} {label}", "no ONNX mapping for this operation")
        args = [self.arg(a) for a in node.args]
        kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
        return convert(self.b, self.info(node, _where(node)), args, kwargs)

    def run(self, dynamic_batch: bool) -> Tuple[List[onnx.ValueInfoProto], List[onnx.ValueInfoProto]]:
        inputs, outputs = [], []
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.values[node] = node.name
                inputs.append(_value_info(node.name, _shape(node), dynamic_batch))
            elif node.op == "get_attr":
                t = getattr(self.gm, node.target)
                self.values[node] = self.b.const(float_array(t, str(node.target)), hint="attr")
            elif node.op == "call_module":
                self.values[node] = self.module(node)
            elif node.op in ("call_function", "call_method"):
                self.values[node] = self.call(node)
            elif node.op == "output":
                results = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
                for i, r in enumerate(results):
                    if not isinstance(r, fx.Node):
                        raise ExportError("output", "model output", f"output {i} is not a tensor")
                    name = self.b.node("Identity", [self.values[r]], hint=f"output{i}")
                    outputs.append(_value_info(name, _shape(r), dynamic_batch))
        return inputs, outputs


def export_onnx(model: nn.Module, example_inputs: Union[torch.Tensor, Sequence[torch.Tensor]],
                path: Optional[Union[str, os.PathLike]] = None, opset: int = 21, *, scale_format: str = "float32",
                dynamic_batch: bool = True) -> onnx.ModelProto:
    """Export ``model`` (float32, run in eval mode) to ONNX; save it at ``path`` when given.

    Args:
        model: a module of groupquant Quant* layers and supported torch modules/functions.
        example_inputs: a float32 tensor or a tuple of them (fixes ranks and feature sizes).
        path: file to write (None: only return the model).
        opset: ONNX opset, 21 (blocked DequantizeLinear) to 26.
        scale_format: power-of-two weight scales as ``'float32'`` initializers, or ``'e8m0'``
            bytes plus a Cast (opset 24 and up; onnxruntime's DequantizeLinear does not take
            E8M0 directly). Float (non power-of-two) scales are always float32.
        dynamic_batch: make dim 0 of every input and output symbolic (``'batch'``).

    Returns the checked ``onnx.ModelProto``. Raises :class:`ExportError` (a ValueError) naming the
    first layer or operation that cannot be exported.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    b = GraphBuilder(check_opset(opset))
    options = QuantLayerOptions(scale_format=scale_format)
    if scale_format == "e8m0" and opset < E8M0_MIN_OPSET:
        raise ValueError(f"scale_format='e8m0' needs opset >= {E8M0_MIN_OPSET} (FLOAT8E8M0), got opset={opset}")
    inputs = _example_tuple(example_inputs)
    _check_float32(model)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            gm = _trace(model, inputs)
            graph_inputs, graph_outputs = _Converter(gm, b, options).run(dynamic_batch)
    finally:
        model.train(was_training)
    onnx_model = b.model(graph_inputs, graph_outputs, name=type(model).__name__)
    if path is not None:
        onnx.save(onnx_model, os.fspath(path))
    return onnx_model
