"""PackedGemmOp: PackedLinear's GEMM on the quant-layer route (the input dtype check naming the layer,
the bias quantizer, a training-mode call taking the op's input-only backward, the op on its own)."""
import copy

import pytest
import torch
import torch.nn.functional as F

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.export import PackedLinear
from groupquant.nn import QuantLinear
from groupquant.nn.gemm.gemm_op import LINEAR
from groupquant.nn.gemm.packed_gemm_op import PackedGemmOp
from groupquant.quant_tensor import plain


def quant_layer(**kw):
    torch.manual_seed(0)
    return QuantLinear(64, 24, weight_quant=Q.MXFloat4e2m1Weight, **kw).eval()


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_an_input_dtype_the_kernel_does_not_take_is_refused_naming_the_layer(dtype):
    packed = PackedLinear.from_quant_linear(quant_layer(), name="blocks.0.fc")
    x = torch.ones(2, 64, dtype=dtype)
    with pytest.raises(TypeError, match=rf"^blocks\.0\.fc: packed inference takes input of dtype .*{dtype}"):
        packed(x)


def test_the_bias_quantizer_runs_on_the_packed_route():
    layer = quant_layer(input_quant=Q.Int8ActPerTensor, bias_quant=Q.Int16BiasPerTensor)
    with torch.no_grad():
        layer.bias.mul_(1000.0).add_(0.3)  # a bias whose int16 rounding is visible
    packed = gq.pack_model(copy.deepcopy(layer))
    x = torch.randn(5, 64)
    with torch.no_grad():
        qx = plain(layer.input_quant(x)).double()
        qb = plain(layer.quant_bias()).double()
        w = layer.quant_weight().value.double()
        got = packed(x)
    assert not torch.equal(qb, layer.bias.double())  # (the bias quantizer changes the bias)
    ref = F.linear(qx, w, qb)
    torch.testing.assert_close(got.double(), ref, rtol=1e-6, atol=1e-3)
    assert (got.double() - F.linear(qx, w, layer.bias.double())).abs().max() > 1e-3  # (and it shows)


def test_a_training_mode_call_takes_the_input_only_backward():
    # the layer's weight quantizer is a dynamic MX one, which would choose the memory-lean backward
    # for a float weight: the packed weight skips it and the input still gets dY @ W
    layer = quant_layer()
    packed = gq.pack_model(copy.deepcopy(layer)).train()
    x = torch.randn(3, 64, requires_grad=True)
    grad_out = torch.randn(3, 24)
    packed(x).backward(grad_out)
    ref = grad_out.double() @ layer.quant_weight().value.detach().double()
    assert x.grad is not None
    torch.testing.assert_close(x.grad.double(), ref, rtol=1e-6, atol=1e-6)
    assert all(p.grad is None for p in packed.parameters())


def test_the_op_alone_is_linear_on_the_decoded_weight():
    layer = quant_layer()
    packed = PackedLinear.from_quant_linear(layer)
    op = PackedGemmOp(layer_name="fc")
    assert op.stores_weight and not LINEAR.stores_weight
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    b = torch.randn(24, dtype=torch.bfloat16)
    y = op.forward(x, packed._weight(), b)
    assert y.dtype == torch.bfloat16 and not op.lean_supported(x, layer.weight)
    # reference: float64 product of the bf16 input and the fake-quant weight, the bias in float32
    ref = F.linear(x.double(), layer.quant_weight().value.detach().double(), b.float().double())
    torch.testing.assert_close(y.double(), ref, rtol=2.0 ** -7, atol=2.0 ** -7 * float(ref.abs().max()))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_under_autocast_the_input_takes_autocasts_dtype_as_torchs_linear_does(dtype):
    layer = quant_layer()
    packed = gq.pack_model(copy.deepcopy(layer))
    torch.manual_seed(1)
    x = torch.randn(5, 64) * 2.0 ** torch.randint(-6, 7, (1, 64))  # columns over several binades
    x.requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):
        got = packed(x)
        want_quant_layer = layer(x)
        with torch.autocast("cpu", enabled=False):
            plain_float = packed(x)
    assert got.dtype == dtype == want_quant_layer.dtype and plain_float.dtype == torch.float32
    with torch.no_grad():
        assert torch.equal(got, packed(x.detach().to(dtype)))  # the kernel on the cast input, bit for bit
    # the quant layer under autocast (torch's linear in that dtype) within the dtype's rounding
    ref = F.linear(x.detach().to(dtype).double(), layer.quant_weight().value.detach().double(), layer.bias.double())
    scale = float(ref.abs().max())
    for y in (got, want_quant_layer):
        torch.testing.assert_close(y.double(), ref, rtol=2.0 ** -7, atol=2.0 ** -7 * scale)
    got.float().sum().backward()  # the float32 input gets its gradient through the cast
    assert x.grad is not None and x.grad.dtype == torch.float32
