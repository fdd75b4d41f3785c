"""GemmRounding and grad_weight_groups: a QuantLinear / QuantConv2d rounding its operands, output and
gradients, against compositions of groupquant's fake_quant, float GEMMs and torch's bfloat16 cast."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from groupquant import fake_quant
from groupquant.inject import ConfigError
from groupquant.nn import DISABLED, GemmRounding, QuantConv2d, QuantIdentity, QuantLinear, Recipe
from groupquant.quantizers import MXFloat4e2m1Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight, MXFloat8e5m2Act

BF16 = GemmRounding(input="bfloat16", weight="bfloat16", bias="bfloat16", output="bfloat16", grad_output="bfloat16",
                    grad_input="bfloat16", grad_weight="bfloat16", grad_bias="bfloat16")


def bf(t: torch.Tensor) -> torch.Tensor:
    """torch's bfloat16 cast (round to nearest even): independent of groupquant."""
    return t.to(torch.bfloat16).float()


def fq(t: torch.Tensor, fmt: str, dim: int) -> torch.Tensor:
    return fake_quant(t, fmt, 32, dim=dim)


def _layer(rounding, **slots):
    torch.manual_seed(0)
    slots.setdefault("grad_output_quant", MXFloat8e5m2Act)
    return QuantLinear(64, 40, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act, gemm_rounding=rounding,
                       **slots)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2 ** 16), scale=st.sampled_from([0.01, 1.0, 300.0]))
def test_linear_rounds_operands_output_and_gradients(seed, scale):
    layer = _layer(BF16)
    torch.manual_seed(seed)
    x = (torch.randn(48, 64) * scale).requires_grad_()
    g = torch.randn(48, 40) * scale
    y = layer(x)
    y.backward(g)
    w, b = layer.weight.detach(), layer.bias.detach()
    xr, wr, gr = bf(x.detach()), bf(w), bf(g)
    assert torch.equal(y, bf(bf(F.linear(fq(xr, "fp8_e4m3", -1), fq(wr, "fp4_e2m1", -1))) + bf(b)))
    # dX = q(Q(q(dY) | O) Q(q(W) | O)); dW = q(Q(q(dY) | T)^T Q(q(x) | T)) with the default slots
    assert torch.equal(x.grad, bf(fq(gr, "fp8_e5m2", -1) @ fq(wr, "fp4_e2m1", 0)))
    assert torch.equal(layer.weight.grad, bf(fq(gr, "fp8_e5m2", 0).t() @ fq(xr, "fp8_e4m3", 0)))
    assert torch.equal(layer.bias.grad, bf(gr.sum(0)))


def test_no_grad_forward_equals_the_training_forward_and_unrounded_differs():
    layer = _layer(BF16)
    x = torch.randn(16, 64) * 3
    with torch.no_grad():
        y_eval = layer(x)
    assert torch.equal(y_eval, layer(x.requires_grad_()).detach())
    plain = _layer(None)
    assert not torch.equal(plain(x).detach(), y_eval)


def test_bias_inside_rounds_once_and_backward_operands_given():
    r = GemmRounding(input="bfloat16", weight="bfloat16", bias="bfloat16", output="bfloat16", bias_add="inside",
                     backward_operands="given")
    layer = _layer(r, weight_quant_for_grad_input=DISABLED, input_quant_for_grad_weight=DISABLED,
                   grad_output_quant=DISABLED)
    x = (torch.randn(8, 64) * 3).requires_grad_()
    g = torch.randn(8, 40)
    y = layer(x)
    y.backward(g)
    w, b = layer.weight.detach(), layer.bias.detach()
    assert torch.equal(y, bf(F.linear(fq(bf(x.detach()), "fp8_e4m3", -1), fq(bf(w), "fp4_e2m1", -1), bf(b))))
    # float backward GEMMs on the operands as given (not rounded), gradients not rounded
    assert torch.equal(x.grad, g @ w)
    assert torch.equal(layer.weight.grad, g.t() @ x.detach())


def test_sequence_groups_block_each_sequence_on_its_own():
    layer = _layer(None, grad_weight_groups="sequence")
    x = (torch.randn(3, 20, 64) * 2).requires_grad_()  # 20 tokens: a block of 32 would span sequences
    g = torch.randn(3, 20, 40)
    layer(x).backward(g)
    want = fq(g, "fp8_e5m2", -2).reshape(-1, 40).t() @ fq(x.detach(), "fp8_e4m3", -2).reshape(-1, 64)
    assert torch.equal(layer.weight.grad, want)
    flat = _layer(None)
    x2 = x.detach().clone().requires_grad_()
    flat(x2).backward(g)
    assert not torch.equal(flat.weight.grad, want)


def test_conv_rounds_output_and_gradients():
    r = GemmRounding(input="bfloat16", weight="bfloat16", bias="bfloat16", output="bfloat16", bias_add="inside",
                     grad_output="bfloat16", grad_input="bfloat16", grad_weight="bfloat16", grad_bias="bfloat16")
    torch.manual_seed(1)
    layer = QuantConv2d(32, 8, 3, padding=1, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act,
                        quantize_backprop=True, gemm_rounding=r, grad_output_quant=DISABLED,
                        weight_quant_for_grad_input=DISABLED, input_quant_for_grad_weight=DISABLED)
    x = (torch.randn(2, 32, 5, 5) * 3).requires_grad_()
    g = torch.randn(2, 8, 5, 5)
    y = layer(x)
    y.backward(g)
    w, b = layer.weight.detach(), layer.bias.detach()
    want = bf(F.conv2d(fq(bf(x.detach()), "fp8_e4m3", 1), fq(bf(w), "fp8_e4m3", 1), bf(b), padding=1))
    assert torch.equal(y, want)
    gr = bf(g)
    xs, ws = bf(x.detach()).requires_grad_(), bf(w).requires_grad_()
    F.conv2d(xs, ws, padding=1).backward(gr)
    assert torch.equal(x.grad, bf(xs.grad)) and torch.equal(layer.bias.grad, bf(gr.sum((0, 2, 3))))
    assert torch.allclose(layer.weight.grad, bf(ws.grad), rtol=1e-2)


def test_errors_name_the_setting():
    with pytest.raises(ConfigError, match="gemm_rounding.output"):
        GemmRounding(output="bfloat99x")
    with pytest.raises(ConfigError, match="bias_add"):
        GemmRounding(bias_add="after")
    with pytest.raises(ConfigError, match="quantize_backprop=True"):
        QuantLinear(8, 8, weight_quant=MXFloat8e4m3Weight, gemm_rounding=GemmRounding(grad_input="bfloat16"))
    with pytest.raises(ConfigError, match="quantize_backprop=True"):
        QuantLinear(8, 8, weight_quant=MXFloat8e4m3Weight, grad_weight_groups="sequence")
    with pytest.raises(ConfigError, match="grad_weight_groups"):
        QuantLinear(8, 8, quantize_backprop=True, grad_weight_groups="batch")
    with pytest.raises(TypeError, match="gemm_rounding"):
        QuantLinear(8, 8, quantize_backprop=True, gemm_rounding="bfloat16")
    with pytest.raises(Exception, match="gemm_rounding"):
        QuantIdentity(input_quant=MXFloat8e4m3Act, gemm_rounding=BF16)


def test_recipe_carries_the_rounding_to_its_layers():
    r = Recipe("bf", weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act, grad_output_quant=MXFloat8e5m2Act,
               gemm_rounding=BF16, grad_weight_groups="sequence")
    kwargs = r.layer_kwargs()
    assert kwargs["gemm_rounding"] is BF16 and kwargs["grad_weight_groups"] == "sequence"
    assert "gemm_rounding" not in Recipe("plain").layer_kwargs()
    assert "GemmRounding(input=e8m7" in r.describe()
    with pytest.raises(ConfigError, match="grad_weight_groups"):
        Recipe("bad", grad_weight_groups="batch")


def test_quant_conv3d_is_conv3d_of_the_quantized_operands():
    from groupquant.nn import QuantConv3d
    torch.manual_seed(2)
    layer = QuantConv3d(32, 4, 2, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act,
                        grad_output_quant=MXFloat8e5m2Act, weight_quant_for_grad_input=DISABLED,
                        input_quant_for_grad_weight=DISABLED, grad_output_quant_for_grad_weight=DISABLED)
    assert isinstance(layer, torch.nn.Conv3d)
    x = torch.randn(2, 32, 3, 3, 3, requires_grad=True)
    g = torch.randn(2, 4, 2, 2, 2)
    y = layer(x)
    y.backward(g)
    w = layer.weight.detach()
    assert torch.equal(y, F.conv3d(fq(x.detach(), "fp8_e4m3", 1), fq(w, "fp8_e4m3", 1), layer.bias.detach()))
    xs = x.detach().clone().requires_grad_()
    F.conv3d(xs, w).backward(fq(g, "fp8_e5m2", 1))  # dX = conv_input(Q(dY | channels), W)
    assert torch.allclose(x.grad, xs.grad, atol=1e-5)


def test_quant_matmul_rounds_operands_output_and_gradients():
    from groupquant.nn import QuantMatMul
    mm = QuantMatMul(a_quant=MXFloat8e4m3Act, b_quant=MXFloat8e4m3Act, grad_output_quant=MXFloat8e5m2Act,
                     gemm_rounding=BF16)
    torch.manual_seed(3)
    a = (torch.randn(2, 8, 64) * 3).requires_grad_()
    b = torch.randn(64, 40).requires_grad_()
    g = torch.randn(2, 8, 40)
    y = mm(a, b)
    y.backward(g)
    ar, br, gr = bf(a.detach()), bf(b.detach()), bf(g)
    assert torch.equal(y, bf(torch.matmul(fq(ar, "fp8_e4m3", -1), fq(br, "fp8_e4m3", -2))))
    assert torch.equal(a.grad, bf(torch.matmul(fq(gr, "fp8_e5m2", -1), fq(br, "fp8_e4m3", -1).t())))
    # dB rounded per batch, then summed over the broadcast batch dim
    assert torch.equal(b.grad, bf(fq(ar, "fp8_e4m3", -2).transpose(-1, -2) @ fq(gr, "fp8_e5m2", -2)).sum(0))
    with pytest.raises(ConfigError, match="gemm_rounding"):
        QuantMatMul(a_quant=MXFloat8e4m3Act, gemm_rounding=GemmRounding(output="bfloat16"))


def test_quant_matmul_bias_is_added_after_the_rounded_product():
    from groupquant.nn import QuantMatMul
    mm = QuantMatMul(a_quant=MXFloat8e4m3Act, b_quant=MXFloat8e4m3Act, quantize_backprop=True,
                     gemm_rounding=GemmRounding(output="bfloat16", bias="fp16", grad_output="bfloat16",
                                                grad_bias="fp16"))
    torch.manual_seed(4)
    a, b = torch.randn(6, 64), torch.randn(64, 10)
    bias = (torch.randn(10) * 5).requires_grad_()
    g = torch.randn(6, 10) * 7
    y = mm(a, b, bias)
    y.backward(g)
    fp16 = lambda t: t.to(torch.float16).float()  # noqa: E731
    assert torch.equal(y, bf(bf(fq(a, "fp8_e4m3", -1) @ fq(b, "fp8_e4m3", -2)) + fp16(bias.detach())))
    assert torch.equal(bias.grad, fp16(bf(g).sum(0)))
