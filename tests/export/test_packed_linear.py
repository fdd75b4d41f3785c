"""PackedLinear as a quant layer: its input gradient, dtype casts, in-place tensor-scale changes,
the output quantizer / return_quant_tensor tail, and ONNX export of a packed model."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.export import PackedLinear, packed_state_dict, unpacked_state_dict
from groupquant.nn import QuantLayerMixin, QuantLinear
from groupquant.quant_tensor import QuantTensor, plain


def quant_layer(wq=Q.NVFP4Weight, **kw):
    torch.manual_seed(0)
    return QuantLinear(40, 12, weight_quant=wq, **kw).eval()


@pytest.mark.parametrize("wq", [Q.MXFloat4e2m1Weight, Q.NVFP4Weight, Q.MXInt8Weight], ids=lambda q: q.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_gives_the_input_gradient_of_the_frozen_quant_layer(wq, dtype):
    layer = quant_layer(wq, input_quant=Q.MXFloat8e4m3Act, dtype=dtype)
    packed = gq.pack_model(copy.deepcopy(layer))
    x = torch.randn(5, 40, dtype=dtype, requires_grad=True)
    grad_out = torch.randn(5, 12, dtype=dtype)
    packed(x).backward(grad_out)
    # reference: the input quantizer's straight-through gradient of dY @ W, W the fake-quant weight (float64)
    w = layer.quant_weight().value.detach().double()
    ref = (grad_out.double() @ w).to(dtype)
    assert x.grad is not None and x.grad.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 2.0 ** -7
    assert torch.allclose(x.grad.double(), ref.double(), rtol=tol, atol=tol * float(ref.abs().max()))


def test_a_packed_layer_is_a_quant_layer_with_the_output_tail():
    layer = quant_layer(Q.MXFloat4e2m1Weight, output_quant=Q.MXFloat8e4m3Act, return_quant_tensor=True)
    packed = gq.pack_model(copy.deepcopy(layer))
    assert isinstance(packed, QuantLayerMixin)
    x = torch.randn(3, 40)
    with torch.no_grad():
        ref = layer(x)
        got = packed(x)
    assert isinstance(got, QuantTensor) and type(got) is type(ref)
    # the output quantizer of F.linear(x, W_q, b) (float64 product rounded to float32 first)
    y = F.linear(x.double(), layer.quant_weight().value.double(), layer.bias.double()).float()
    assert torch.equal(plain(got), plain(layer.output_quant(y)))
    assert torch.equal(packed.quant_weight().value, layer.quant_weight().value)


@pytest.mark.parametrize("cast", ["to_bf16", "half", "double"])
def test_dtype_casts_keep_the_float32_state_or_are_refused_by_name(cast):
    layer = quant_layer(Q.NVFP4Weight)
    packed = gq.pack_model(copy.deepcopy(layer))
    before = {k: v.clone() for k, v in packed.state_dict().items()}
    if cast == "double":
        with pytest.raises(TypeError, match="QuantLinear: PackedLinear .*float64"):
            packed.double()
        return
    dtype = torch.bfloat16 if cast == "to_bf16" else torch.float16
    packed = packed.to(dtype) if cast == "to_bf16" else packed.half()
    for k, v in packed.state_dict().items():  # bias, codes, scale bytes, tensor scale: not rounded
        assert v.dtype == before[k].dtype and torch.equal(v, before[k])
    x = torch.randn(4, 40)
    with torch.no_grad():
        ref = F.linear(x.double(), layer.quant_weight().value.double(), layer.bias.double())
        y = packed(x.to(dtype))
    assert y.dtype == dtype
    assert torch.allclose(y.double(), ref.to(dtype).double(), rtol=2.0 ** -6, atol=2.0 ** -6 * float(ref.abs().max()))
    sd = packed_state_dict(packed)  # works after the cast; the weight now dequantizes to the new dtype
    assert unpacked_state_dict(sd)["weight"].dtype == dtype
    assert torch.equal(unpacked_state_dict(sd)["weight"], layer.quant_weight().value.to(dtype))


def test_in_place_change_of_the_tensor_scale_is_seen_by_forward():
    layer = quant_layer(Q.NVFP4Weight)
    packed = gq.pack_model(copy.deepcopy(layer))
    x = torch.randn(2, 40)
    with torch.no_grad():
        packed(x)  # the kernel record is made
        packed.weight_tensor_scale.mul_(2.0)
        y = packed(x)
    w = layer.quant_weight().value.double() * 2.0  # (element * block scale) * (2 g): exact in float64
    ref = F.linear(x.double(), w, layer.bias.double())
    assert torch.allclose(y.double(), ref, rtol=1e-6, atol=1e-6)


def test_onnx_export_of_a_packed_model_gives_the_quant_model_graph():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from groupquant.export import export_onnx

    torch.manual_seed(3)
    model = nn.Sequential(QuantLinear(64, 16, weight_quant=Q.MXFloat4e2m1Weight, input_quant=Q.MXFloat8e4m3Act),
                          nn.ReLU(), QuantLinear(16, 4, weight_quant=Q.MXFloat8e4m3Weight)).eval()
    x = torch.randn(3, 64)
    packed = gq.pack_model(copy.deepcopy(model))
    assert isinstance(packed[0], PackedLinear)
    proto = export_onnx(packed, x)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        ref = model(x)
    assert torch.allclose(torch.from_numpy(y), ref, rtol=1e-5, atol=1e-5)
    assert onnx.checker.check_model(proto) is None


def test_a_replaced_buffer_is_seen_by_the_next_forward():
    """The layer keeps its kernel view between calls; a buffer put in its place (not copied into
    the old tensor) must still reach the kernel."""
    a, b = gq.pack_model(quant_layer(Q.MXFloat4e2m1Weight)), gq.pack_model(quant_layer(Q.MXFloat4e2m1Weight))
    with torch.no_grad():
        b.weight_codes.copy_(torch.randint(0, 256, b.weight_codes.shape, dtype=torch.uint8))
    x = torch.randn(3, 40)
    with torch.no_grad():
        a(x)  # the view of a's own buffers is made
        for name in ("weight_codes", "weight_scale"):
            setattr(a, name, getattr(b, name).clone())
        assert torch.equal(a(x), b(x))
        ref = F.linear(x.double(), b.dequantized_weight().double(), b.bias.double())
        assert torch.allclose(a(x).double(), ref, rtol=1e-6, atol=1e-6)
