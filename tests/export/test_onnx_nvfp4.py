"""Whole-model ONNX export of NVFP4 (and other scale formats): weights and activation quantizers
bit for bit, model outputs up to MatMul accumulation order, ExportError naming layer and setting."""
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

TP = onnx.TensorProto
NVFP4_WEIGHTS = {"nvfp4": Q.NVFP4Weight, "nvfp4_single_level": Q.NVFP4Weight.let(tensor_scale=False)}


def session(model_proto, extra_outputs=()):
    m = onnx.ModelProto()
    m.CopyFrom(model_proto)
    for name in extra_outputs:
        m.graph.output.append(onnx.helper.make_tensor_value_info(name, TP.FLOAT, None))
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def weight_names(model_proto):
    """The float weight each MatMul (via its Transpose) or Conv consumes, in graph order."""
    return [n.input[0] if n.op_type == "Transpose" else n.input[1] for n in model_proto.graph.node
            if n.op_type in ("Transpose", "Conv")]


@pytest.mark.parametrize("aq", [Q.NVFP4Act, None], ids=lambda q: getattr(q, "__name__", "float_act"))
@pytest.mark.parametrize("name", NVFP4_WEIGHTS)
def test_nvfp4_mlp_weights_bit_exact_outputs_close(name, aq, bits_equal):
    torch.manual_seed(0)
    wq = NVFP4_WEIGHTS[name]
    model = nn.Sequential(QuantLinear(70, 48, weight_quant=wq, input_quant=aq), nn.ReLU(),
                          QuantLinear(48, 10, bias=False, weight_quant=wq, input_quant=aq)).eval()
    x = torch.randn(5, 70) * 3
    proto = export_onnx(model, x)
    e4m3 = [i for i in proto.graph.initializer if "_scale_e4m3" in i.name]
    assert len(e4m3) == 2 and all(i.data_type == TP.FLOAT8E4M3FN for i in e4m3)
    s = session(proto, weight_names(proto))
    for batch in (5, 2):
        y, *weights = s.run(None, {s.get_inputs()[0].name: x[:batch].numpy()})
        with torch.no_grad():
            for w, layer in zip(weights, (model[0], model[2])):
                assert bits_equal(torch.from_numpy(w), plain(layer.quant_weight()))
            ref = model(x[:batch])
        np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5 * float(ref.abs().max()))


@pytest.mark.parametrize("aq", [Q.NVFP4Act, Q.NVFP4Act.let(tensor_scale=False)], ids=["two_level", "single_level"])
def test_nvfp4_activation_bit_exact_for_any_batch(aq, bits_equal):
    model = QuantIdentity(input_quant=aq).eval()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 100, generator=g) * torch.exp2(torch.randint(-12, 12, (4, 100), generator=g).float())
    s = session(export_onnx(model, x))
    for xb in (x, x[:1], x * 1e-37, torch.zeros(2, 100)):
        (y,) = s.run(None, {s.get_inputs()[0].name: xb.numpy()})
        with torch.no_grad():
            assert bits_equal(torch.from_numpy(y), model(xb))


def test_conv_with_nvfp4_and_other_scale_formats(bits_equal):
    torch.manual_seed(1)
    e5m0 = Q.MXFloat8e4m3Weight.let(scale_format="e5m0")
    model = nn.Sequential(
        QuantConv2d(16, 8, 3, padding=1, weight_quant=Q.NVFP4Weight, input_quant=Q.NVFP4Act),
        QuantReLU(output_quant=Q.NVFP4Act, feature_dim=1), nn.Flatten(),
        QuantLinear(8 * 16, 5, weight_quant=e5m0)).eval()
    x = torch.randn(2, 16, 4, 4)
    with torch.no_grad():
        ref = model(x)
    for opset, scale_format in ((21, "float32"), (25, "e8m0")):
        proto = export_onnx(model, x, opset=opset, scale_format=scale_format)
        scales = {i.name: i.data_type for i in proto.graph.initializer if "_scale" in i.name and "tensor" not in i.name}
        assert scales["0_weight_scale_e4m3_0"] == TP.FLOAT8E4M3FN  # UE4M3 bytes whatever the option
        assert scales.get("3_weight_scale_e8m0_0" if scale_format == "e8m0" else "3_weight_scale_0") == (
            TP.FLOAT8E8M0 if scale_format == "e8m0" else TP.FLOAT)
        s = session(proto, weight_names(proto))
        y, w_conv, w_fc = s.run(None, {s.get_inputs()[0].name: x.numpy()})
        with torch.no_grad():
            assert bits_equal(torch.from_numpy(w_conv), plain(model[0].quant_weight()))
            assert bits_equal(torch.from_numpy(w_fc), plain(model[3].quant_weight()))
        np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5 * float(ref.abs().max()))


@pytest.mark.parametrize("layer,match", [
    (QuantLinear(8, 4, input_quant=Q.NVFP4Act, input_float_to_int_rounding="stochastic"),
     "input_quant NVFP4Act.*rounding='stochastic'"),
    (QuantLinear(8, 4, weight_quant=Q.MXFloat8e4m3Weight.let(exponent_bit_width=3, mantissa_bit_width=4,
                                                               scale_format="ue4m3", restrict_scaling_type="fp")),
     "weight_quant .*fp8_e3m4 has no ONNX type"),
])
def test_what_cannot_export_is_named(layer, match):
    model = nn.Sequential()
    model.add_module("head", layer)
    with pytest.raises(ExportError, match=f"'head'.*{match}"):
        export_onnx(model, torch.randn(2, 8))
