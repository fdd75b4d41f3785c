import numpy as np
import pytest
import torch
from torch import nn

import groupquant.quantizers as Q
from groupquant.nn import QuantConv2d, QuantIdentity, QuantLinear, QuantReLU
from groupquant.quant_tensor import plain

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from groupquant.export.errors import ExportError  # noqa: E402
from groupquant.export.onnx.model import export_onnx  # noqa: E402

MX_WEIGHTS = [Q.MXInt8Weight, Q.MXFloat8e4m3Weight, Q.MXFloat8e5m2Weight, Q.MXFloat6e3m2Weight,
              Q.MXFloat6e2m3Weight, Q.MXFloat4e2m1Weight]
MX_ACTS = [Q.MXFloat8e4m3Act, Q.MXFloat8e5m2Act, Q.MXInt8Act]


def session(model_proto, extra_outputs=()):
    """An onnxruntime session; ``extra_outputs`` (value names) become graph outputs too."""
    m = onnx.ModelProto()
    m.CopyFrom(model_proto)
    for name in extra_outputs:
        m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def weight_values(model_proto):
    """The float weight each MatMul (via its Transpose) or Conv consumes, in graph order."""
    names = []
    for node in model_proto.graph.node:
        if node.op_type == "Transpose" or node.op_type == "Conv":
            names.append(node.input[0] if node.op_type == "Transpose" else node.input[1])
    return names


def assert_weight_exact(w, layer, bits_equal):
    """The graph's weight equals the layer's fake-quant weight: bit for bit for float formats; for
    integer formats up to the sign of zero (an int code has no -0), and bit for bit against the
    dequantized codes."""
    w = torch.from_numpy(w)
    with torch.no_grad():
        qt = layer.quant_weight()
    ref = plain(qt)
    assert bits_equal(w, qt.to_group_quantized().dequantize())
    assert torch.equal(w, ref)
    if qt.fmt.is_float:
        assert bits_equal(w, ref)


def mlp(wq, aq):
    torch.manual_seed(0)
    return nn.Sequential(QuantLinear(70, 48, weight_quant=wq, input_quant=aq), nn.ReLU(),
                         QuantLinear(48, 10, bias=False, weight_quant=wq, input_quant=aq))


@pytest.mark.parametrize("aq", MX_ACTS + [None], ids=lambda q: getattr(q, "__name__", "float_act"))
@pytest.mark.parametrize("wq", MX_WEIGHTS, ids=lambda q: q.__name__)
def test_mx_linear_model_runs_with_exact_weights(wq, aq, bits_equal):
    model = mlp(wq, aq).eval()
    x = torch.randn(5, 70) * 3
    proto = export_onnx(model, x)
    names = weight_values(proto)
    s = session(proto, names)
    for batch in (5, 2):
        xb = x[:batch]
        y, *weights = s.run(None, {s.get_inputs()[0].name: xb.numpy()})
        for w, layer in zip(weights, (model[0], model[2])):
            assert_weight_exact(w, layer, bits_equal)
        with torch.no_grad():
            ref = model(xb)
        np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5 * float(ref.abs().max()))


def test_activation_subgraph_equals_the_layer_input_quantizer(bits_equal):
    model = QuantIdentity(input_quant=Q.MXFloat8e4m3Act).eval()
    x = torch.randn(4, 100) * torch.exp2(torch.randint(-8, 8, (4, 100)).float())
    proto = export_onnx(model, x)
    s = session(proto)
    (y,) = s.run(None, {s.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        assert bits_equal(torch.from_numpy(y), model(x))


def test_conv_model_with_group_int_weights_and_e8m0_scales(tmp_path, bits_equal):
    torch.manual_seed(1)
    model = nn.Sequential(
        QuantConv2d(3, 8, 3, padding=1, weight_quant=Q.MXFloat4e2m1Weight, input_quant=Q.MXFloat8e4m3Act),
        QuantReLU(output_quant=Q.MXInt8Act, feature_dim=1), nn.Flatten(),
        QuantLinear(8 * 36, 5, weight_quant=Q.Int4WeightPerGroupFloat, weight_group_size=32)).eval()
    x = torch.randn(2, 3, 6, 6)
    path = tmp_path / "conv.onnx"
    export_onnx(model, x, path, opset=25)
    proto = onnx.load(path)
    s = session(proto, weight_values(proto))
    y, w_conv, w_fc = s.run(None, {s.get_inputs()[0].name: x.numpy()})
    assert_weight_exact(w_conv, model[0], bits_equal)
    assert_weight_exact(w_fc, model[3], bits_equal)
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    e8m0 = export_onnx(model, x, opset=25, scale_format="e8m0")
    scales = {i.name: i.data_type for i in e8m0.graph.initializer if "_scale" in i.name}
    assert scales == {"0_weight_scale_e8m0_0": onnx.TensorProto.FLOAT8E8M0,  # MXFP4: one byte per block
                      "3_weight_scale_0": onnx.TensorProto.FLOAT}  # int4 per group has float scales
    s = session(e8m0)
    np.testing.assert_allclose(s.run(None, {s.get_inputs()[0].name: x.numpy()})[0], ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="opset >= 24"):
        export_onnx(model, x, opset=23, scale_format="e8m0")


@pytest.mark.parametrize("layer,match", [
    (QuantLinear(8, 4, weight_quant=Q.Int8WeightPerChannel), "weight quantizer gives IntQuantTensor"),
    (QuantLinear(8, 4, input_quant=Q.Int8ActPerTensor), "input_quant uses"),
    (QuantLinear(8, 4, input_quant=Q.MXFloat8e4m3Act, input_float_to_int_rounding="stochastic"), "stochastic"),
])
def test_layers_that_cannot_export_are_named(layer, match):
    model = nn.Sequential()
    model.add_module("encoder", nn.Sequential(nn.Linear(8, 8)))
    model.add_module("head", layer)
    with pytest.raises(ExportError, match=f"'head'.*{match}"):
        export_onnx(model, torch.randn(2, 8))


def test_single_quant_layer_exports():
    layer = QuantLinear(40, 3, weight_quant=Q.MXFloat6e2m3Weight).eval()
    x = torch.randn(2, 40)
    s = session(export_onnx(layer, x))
    with torch.no_grad():
        np.testing.assert_allclose(s.run(None, {s.get_inputs()[0].name: x.numpy()})[0], layer(x).numpy(),
                                   rtol=1e-5, atol=1e-6)
