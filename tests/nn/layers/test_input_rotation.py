"""A quant layer's online input rotation: exact in float, applied before the input quantizer, kept
by state_dict save / load, pack_model and ONNX export."""
import copy
import io

import pytest
import torch
from torch import nn

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.nn import QuantLinear
from groupquant.nn.layers.input_rotation import InputRotation
from groupquant.ops.hadamard import block_hadamard_matrix


def rotated_layer(block=32, wq=Q.MXFloat4e2m1Weight, aq=Q.MXFloat4e2m1Act, seed=0):
    torch.manual_seed(seed)
    layer = QuantLinear(64, 24, weight_quant=wq, input_quant=aq).eval()
    with torch.no_grad():
        layer.weight.copy_((layer.weight.double() @ block_hadamard_matrix(64, block)).float())
    layer.input_rotation = InputRotation(block)
    return layer


def test_rotation_runs_before_the_input_quantizer():
    layer = rotated_layer()
    x = torch.randn(5, 64) * 3
    x[:, 7] = 40.0  # an outlier feature
    h = block_hadamard_matrix(64, 32, torch.float32)
    qx = gq.fake_quant(x @ h, "fp4_e2m1")  # reference: rotate (dense), then MXFP4 along the features
    ref = qx.double() @ gq.fake_quant(layer.weight.detach(), "fp4_e2m1").double().T + layer.bias.double()
    with torch.no_grad():
        y = layer(x)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-4)


def test_float_layer_with_rotation_is_exact():
    torch.manual_seed(1)
    plain_layer = nn.Linear(64, 8)
    layer = QuantLinear(64, 8)
    layer.load_state_dict(plain_layer.state_dict())
    with torch.no_grad():
        layer.weight.copy_((layer.weight.double() @ block_hadamard_matrix(64, 16)).float())
    layer.input_rotation = InputRotation(16)
    x = torch.randn(4, 64)
    torch.testing.assert_close(layer(x), plain_layer(x), rtol=1e-5, atol=1e-5)


def test_state_dict_recreates_the_rotation_in_a_fresh_layer():
    layer = rotated_layer(block=16)
    buf = io.BytesIO()
    torch.save(layer.state_dict(), buf)
    fresh = QuantLinear(64, 24, weight_quant=Q.MXFloat4e2m1Weight, input_quant=Q.MXFloat4e2m1Act).eval()
    fresh.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert isinstance(fresh.input_rotation, InputRotation) and fresh.input_rotation.block_size == 16
    x = torch.randn(3, 64)
    with torch.no_grad():
        assert torch.equal(fresh(x), layer(x))


def test_loading_an_unrotated_state_dict_into_a_rotated_layer_is_refused():
    layer = rotated_layer()
    plain_sd = QuantLinear(64, 24, weight_quant=Q.MXFloat4e2m1Weight, input_quant=Q.MXFloat4e2m1Act).state_dict()
    with pytest.raises(RuntimeError, match="input_rotation.block_size_"):
        layer.load_state_dict(plain_sd)


@pytest.mark.parametrize("wq,aq", [(Q.MXFloat4e2m1Weight, Q.MXFloat4e2m1Act), (Q.NVFP4Weight, Q.NVFP4Act),
                                   (Q.MXFloat4e2m1Weight, None)])
def test_pack_model_keeps_the_rotation(wq, aq):
    layer = rotated_layer(block=16, wq=wq, aq=aq)
    model = nn.Sequential(copy.deepcopy(layer))
    x = torch.randn(6, 64) * 2
    with torch.no_grad():
        ref = model(x)
        packed = gq.pack_model(model)
        assert isinstance(packed[0].input_rotation, InputRotation)
        torch.testing.assert_close(packed(x), ref, rtol=1e-5, atol=1e-5)
        back = gq.unpack_model(packed)
        assert torch.equal(back(x), ref)


def test_onnx_export_applies_the_rotation_bit_for_bit():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from groupquant.export.onnx.model import export_onnx

    model = nn.Sequential(rotated_layer(block=32, aq=Q.MXFloat8e4m3Act), nn.ReLU()).eval()
    x = torch.randn(5, 64) * 3
    proto = export_onnx(model, x)
    rotated = [n.output[0] for n in proto.graph.node if n.op_type == "Reshape" and "rotated" in n.output[0]]
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    m.graph.output.append(onnx.helper.make_tensor_value_info(rotated[-1], onnx.TensorProto.FLOAT, None))
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    y, xr = s.run(None, {s.get_inputs()[0].name: x[:3].numpy()})
    with torch.no_grad():
        assert torch.equal(torch.from_numpy(xr), model[0].input_rotation(x[:3]))  # the same bits as the layer
        ref = model(x[:3])
    torch.testing.assert_close(torch.from_numpy(y), ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))


def test_packed_state_dict_carries_the_rotation_into_fresh_models():
    from groupquant.export.checkpoints.packed_state_dict import load_packed_state_dict, packed_state_dict

    def fresh():
        return nn.Sequential(QuantLinear(64, 24, weight_quant=Q.MXFloat4e2m1Weight, input_quant=Q.MXFloat4e2m1Act)).eval()

    model = nn.Sequential(rotated_layer(block=16))
    x = torch.randn(3, 64)
    with torch.no_grad():
        ref = model(x)
        for source, target in ((model, fresh()), (gq.pack_model(copy.deepcopy(model)), gq.pack_model(fresh()))):
            load_packed_state_dict(target, packed_state_dict(source))
            assert target[0].input_rotation.block_size == 16
            torch.testing.assert_close(target(x), ref, rtol=1e-5, atol=1e-5)


def test_learned_rotation_is_the_dense_block_diagonal_product_and_reloads():
    from groupquant.nn.layers.input_rotation import LearnedInputRotation
    gen = torch.Generator().manual_seed(4)
    blocks = torch.linalg.qr(torch.randn(2, 32, 32, dtype=torch.float64, generator=gen))[0]  # two orthogonal blocks
    rot = LearnedInputRotation(blocks)
    x = torch.randn(3, 5, 64, generator=gen)
    ref = x.double() @ torch.block_diag(*rot.matrix.double())
    torch.testing.assert_close(rot(x).double(), ref, rtol=1e-5, atol=1e-5)
    layer = rotated_layer()
    layer.input_rotation = rot
    fresh = QuantLinear(64, 24, weight_quant=Q.MXFloat4e2m1Weight, input_quant=Q.MXFloat4e2m1Act).eval()
    fresh.load_state_dict(layer.state_dict())
    assert isinstance(fresh.input_rotation, LearnedInputRotation)
    assert torch.equal(fresh.input_rotation.matrix, rot.matrix)
    with pytest.raises(ValueError, match=r"matrix must be \[blocks, b, b\]"):
        LearnedInputRotation(torch.zeros(2, 32, 16))
    with pytest.raises(ValueError, match="the input has 48 features, the rotation 2 blocks of 32 = 64"):
        rot(torch.randn(2, 48))
