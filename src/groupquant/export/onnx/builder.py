"""A small deterministic builder of ONNX graphs (nodes, initializers, unique names).

Exporters append nodes through :class:`GraphBuilder` instead of tracing, so the same model always
gives the same graph, byte for byte. Names are ``<hint>_<n>`` with a counter per hint.
Constants are initializers, shared when equal (same dtype, shape and bytes).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["GraphBuilder", "MIN_OPSET", "MAX_OPSET", "check_opset"]

#: Blocked DequantizeLinear (``block_size``) needs opset 21.
MIN_OPSET = 21
#: Highest opset onnxruntime 1.31 loads (checked when this exporter was written).
MAX_OPSET = 26


def check_opset(opset: int) -> int:
    """Validate the ``opset`` argument of the exporters."""
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be an integer in [{MIN_OPSET}, {MAX_OPSET}] (blocked DequantizeLinear "
                         f"needs {MIN_OPSET}), got {opset!r}")
    return opset


class GraphBuilder:
    """Collects nodes and initializers of one ONNX graph at a fixed ``opset``."""

    def __init__(self, opset: int) -> None:
        self.opset = check_opset(opset)
        self.nodes: List[onnx.NodeProto] = []
        self.initializers: List[TensorProto] = []
        self._counts: Dict[str, int] = {}
        self._constants: Dict[Tuple[int, Tuple[int, ...], bytes], str] = {}

    def fresh(self, hint: str) -> str:
        """A new unique value name derived from ``hint``."""
        n = self._counts.get(hint, 0)
        self._counts[hint] = n + 1
        return f"{hint}_{n}"

    def initializer(self, tensor: TensorProto, hint: str) -> str:
        """Add a prepared TensorProto as an initializer under a fresh name."""
        tensor.name = self.fresh(hint)
        self.initializers.append(tensor)
        return tensor.name

    def raw_initializer(self, data: bytes, data_type: int, dims: Sequence[int], hint: str) -> str:
        """An initializer from raw little-endian bytes of ONNX type ``data_type`` (packed for 4-bit types)."""
        tensor = helper.make_tensor("", data_type, list(dims), vals=data, raw=True)
        return self.initializer(tensor, hint)

    def const(self, value: Union[float, int, np.ndarray], dtype: Optional[np.dtype] = None, hint: str = "c") -> str:
        """A constant initializer (float32 by default for Python numbers), shared when equal."""
        arr = np.asarray(value, dtype=dtype if dtype is not None else
                         (np.float32 if isinstance(value, float) else None))
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        tensor = numpy_helper.from_array(arr)
        key = (tensor.data_type, tuple(arr.shape), arr.tobytes())
        if key not in self._constants:
            self._constants[key] = self.initializer(tensor, hint)
        return self._constants[key]

    def ints(self, values: Sequence[int]) -> str:
        """An int64 1-D constant (shapes, axes, pads), shared when equal."""
        return self.const(np.asarray(list(values), dtype=np.int64), hint="ints")

    def node(self, op_type: str, inputs: Sequence[str], hint: Optional[str] = None, **attrs: object) -> str:
        """Append a single-output node; returns the output name."""
        out = self.fresh(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"{out}_node", **attrs))
        return out

    def model(self, inputs: List[onnx.ValueInfoProto], outputs: List[onnx.ValueInfoProto],
              name: str = "groupquant") -> onnx.ModelProto:
        """The finished, checked model (IR version: the lowest that supports the opset)."""
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="groupquant")
        model.ir_version = helper.find_min_ir_version_for(opsets)
        onnx.checker.check_model(model, full_check=True)
        return model
