"""Fixtures for the export tests: run a graph in onnxruntime, compare float tensors bit for bit."""
import numpy as np
import pytest
import torch


def run_graph(builder, x: torch.Tensor, out: str) -> torch.Tensor:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    shape = [None] + list(x.shape[1:])  # dynamic batch
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, [None] * x.dim())]
    model = builder.model(inputs, outputs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # default: all optimizations
    (y,) = session.run(None, {"x": x.numpy()})
    return torch.from_numpy(np.asarray(y))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical float32 tensors, except that any NaN equals any NaN."""
    a, b = a.float().contiguous(), b.float().contiguous()
    if a.shape != b.shape:
        return False
    nan = torch.isnan(a)
    if not torch.equal(nan, torch.isnan(b)):
        return False
    return torch.equal(a.view(torch.int32)[~nan], b.view(torch.int32)[~nan])


@pytest.fixture
def ort_run():
    """``ort_run(builder, x, out)``: run a one-input graph (input 'x', dynamic batch) in onnxruntime."""
    pytest.importorskip("onnxruntime")
    return run_graph


@pytest.fixture
def bits_equal():
    """``bits_equal(a, b)``: float32 bit equality, any NaN equal to any NaN."""
    return same_bits
