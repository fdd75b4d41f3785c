"""The memory-lean QuantLinear path: same outputs and gradients as plain autograd, bit for bit,
and the fake-quantized weight freed before the weight gradient is allocated."""
import copy

import pytest
import torch
import torch.nn.functional as F

import groupquant as gq
from groupquant.nn import QuantLinear
from groupquant.nn.gemm.backward_gemm import _QuantGemm
from groupquant.nn.gemm.lean_gemm import lean_applies
from groupquant.quantizers import (Int16BiasPerTensor, LearnedScaling, MXFloat4e2m1Weight, MXFloat8e4m3Act,
                                   MXFloat8e4m3Weight, MXInt8Weight)


class LearnedMXFP4(LearnedScaling, MXFloat4e2m1Weight):
    pass


class ClippedMXFP8(MXFloat8e4m3Weight):
    ste = "clipped"


def run(layer: QuantLinear, x: torch.Tensor, lean: bool, recompute: bool = False):
    """Output and the gradients of input, weight and bias for one backward of a fixed upstream gradient."""
    layer = copy.deepcopy(layer)
    layer.memory_lean_backward = lean
    layer.recompute_quantized_weight = recompute
    x = x.detach().clone().requires_grad_(x.requires_grad)
    y = layer(x)
    y.backward(torch.linspace(-2, 3, y.numel()).reshape(y.shape))
    return y.detach(), x.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad


@pytest.mark.parametrize("shape, input_grad", [((5, 96), True), ((2, 3, 96), True), ((7, 96), False)])
@pytest.mark.parametrize("weight_q, input_q, bias, bias_q", [
    (MXFloat8e4m3Weight, MXFloat8e4m3Act, True, None),
    (MXInt8Weight, None, False, None),
    (MXFloat4e2m1Weight, MXFloat8e4m3Act, True, Int16BiasPerTensor),
])
def test_lean_path_equals_plain_autograd_bit_for_bit(shape, input_grad, weight_q, input_q, bias, bias_q):
    torch.manual_seed(0)
    layer = QuantLinear(96, 40, bias=bias, weight_quant=weight_q, input_quant=input_q, bias_quant=bias_q)
    x = (torch.randn(shape) * 3).requires_grad_(input_grad)
    lean, plain = run(layer, x, True), run(layer, x, False)
    assert (lean[1] is not None) == input_grad and lean[2] is not None
    for a, b in zip(lean, plain):
        assert (a is None and b is None) or torch.equal(a, b)
    fmt = layer.weight_quant.fmt
    assert torch.equal(lean[0], plain[0])
    if input_q is None and bias_q is None:  # and both equal the bare composition
        expected = F.linear(x.detach(), gq.fake_quant(layer.weight.detach(), fmt), layer.bias)
        assert torch.equal(lean[0], expected)


def test_lean_path_is_taken_only_where_it_applies():
    assert lean_applies(QuantLinear(64, 8, weight_quant=MXFloat8e4m3Weight).weight_quant)
    for quant in (LearnedMXFP4, ClippedMXFP8):
        layer = QuantLinear(64, 8, weight_quant=quant)
        assert not lean_applies(layer.weight_quant)
        x = torch.randn(3, 64)
        lean, plain = run(layer, x, True), run(layer, x, False)  # the plain path either way
        assert all(torch.equal(a, b) for a, b in zip(lean, plain) if a is not None)
    assert not lean_applies(QuantLinear(64, 8).weight_quant)


def test_no_grad_and_the_opt_out_take_the_plain_path():
    layer = QuantLinear(64, 8, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act)
    x = torch.randn(3, 64)
    with torch.no_grad():
        y = layer(x)
    assert y.grad_fn is None
    assert "QuantGemm" in type(layer(x).grad_fn).__name__  # training: the weight wants a gradient
    layer.memory_lean_backward = False
    assert "QuantGemm" not in type(layer(x).grad_fn).__name__


def test_weight_gradient_is_written_over_the_quantized_weight(monkeypatch):
    seen = {}
    original = _QuantGemm.backward

    def spy(ctx, grad):
        seen["wq_ptr"] = ctx.wq.data_ptr()
        grads = original(ctx, grad)
        seen["dropped"] = ctx.wq is None
        return grads

    monkeypatch.setattr(_QuantGemm, "backward", staticmethod(spy))
    layer = QuantLinear(64, 8, weight_quant=MXFloat8e4m3Weight)
    x = torch.randn(3, 64, requires_grad=True)
    y = layer(x)
    assert "QuantGemm" in type(y.grad_fn).__name__
    y.sum().backward()
    assert seen["dropped"] and layer.weight.grad.data_ptr() == seen["wq_ptr"]
    assert torch.allclose(layer.weight.grad, torch.ones(8, 3) @ x.detach())  # no input quant: dW = g^T x


def test_a_second_backward_through_the_lean_path_is_a_clear_error():
    layer = QuantLinear(64, 8, weight_quant=MXFloat8e4m3Weight)
    y = layer(torch.randn(3, 64)).sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="memory_lean_backward = False, or layer.recompute_quantized_weight"):
        y.backward()


def test_autocast_takes_the_plain_path():
    layer = QuantLinear(64, 8, weight_quant=MXFloat8e4m3Weight)
    x = torch.randn(3, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert "QuantGemm" not in type(y.grad_fn).__name__
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32 and x.grad is not None


@pytest.mark.parametrize("conv, shape, kwargs", [
    (gq.nn.QuantConv2d, (2, 40, 9, 7), dict(kernel_size=3, stride=2, padding=1, dilation=1, groups=1)),
    (gq.nn.QuantConv2d, (2, 40, 9, 7), dict(kernel_size=(3, 2), stride=1, padding=(2, 0), dilation=2, groups=4)),
    (gq.nn.QuantConv1d, (3, 40, 11), dict(kernel_size=3, stride=1, padding=1, dilation=1, groups=1)),
])
def test_conv_lean_path_equals_plain_autograd_and_the_composition(conv, shape, kwargs):
    torch.manual_seed(1)
    layer = conv(40, 24, bias=True, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act, **kwargs)
    x = (torch.randn(shape) * torch.logspace(-3, 3, shape[1]).reshape(1, -1, *([1] * (len(shape) - 2))))
    x.requires_grad_(True)
    lean, plain = run(layer, x, True), run(layer, x, False)
    for a, b in zip(lean, plain):
        assert torch.equal(a, b)
    xq = gq.fake_quant(x.detach(), "fp8_e4m3", 32, dim=1)
    wq = gq.fake_quant(layer.weight.detach(), "fp8_e4m3", 32, dim=1)
    expected = layer._conv_forward(xq, wq, layer.bias.detach())
    assert torch.equal(lean[0], expected)
    y = copy.deepcopy(layer)(x)
    assert "QuantGemm" in type(y.grad_fn).__name__


def test_conv_with_other_padding_modes_takes_the_plain_path():
    layer = gq.nn.QuantConv2d(8, 4, 3, padding=1, padding_mode="reflect", weight_quant=MXFloat8e4m3Weight)
    x = torch.randn(1, 8, 5, 5, requires_grad=True)
    y = layer(x)
    assert "QuantGemm" not in type(y.grad_fn).__name__
    expected = layer._conv_forward(x.detach(), gq.fake_quant(layer.weight.detach(), "fp8_e4m3", 32, dim=1), layer.bias)
    assert torch.equal(y.detach(), expected.detach())


@pytest.mark.parametrize("layer_of", [
    lambda: QuantLinear(96, 40, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act),
    lambda: QuantLinear(96, 40, bias=False, weight_quant=MXFloat4e2m1Weight),
    lambda: gq.nn.QuantConv2d(40, 24, 3, padding=1, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act),
])
@pytest.mark.parametrize("input_grad", [True, False])
def test_recomputed_quantized_weight_gives_the_same_bits_and_keeps_no_weight(layer_of, input_grad):
    torch.manual_seed(2)
    layer = layer_of()
    with torch.no_grad():  # weight rows over 12 binades: a block scale that differed would show
        layer.weight.mul_(torch.logspace(-6, 6, layer.weight.shape[0]).reshape(-1, *([1] * (layer.weight.dim() - 1))))
    shape = (5, 96) if isinstance(layer, QuantLinear) else (2, 40, 6, 5)
    x = (torch.randn(shape) * 3).requires_grad_(input_grad)
    kept, made, plain = run(layer, x, True), run(layer, x, True, recompute=True), run(layer, x, False)
    for a, b, c in zip(kept, made, plain):
        assert (a is None and b is None and c is None) or (torch.equal(a, b) and torch.equal(a, c))
    # between forward and backward the graph holds the float weight and the quantized input only
    layer.recompute_quantized_weight = True
    y = layer(x)
    assert "QuantGemm" in type(y.grad_fn).__name__ and y.grad_fn.wq is None
    held = {t.data_ptr() for t in y.grad_fn.saved_tensors}
    assert layer.weight.data_ptr() in held and len(held) == 2
    layer.recompute_quantized_weight = False
    assert layer(x).grad_fn.wq is not None  # the default keeps Wq from the forward


def test_a_second_backward_works_when_the_quantized_weight_is_made_again():
    layer = QuantLinear(64, 8, weight_quant=MXFloat8e4m3Weight)
    layer.recompute_quantized_weight = True
    x = torch.randn(3, 64, requires_grad=True)
    y = layer(x).sum()
    y.backward(retain_graph=True)
    first = x.grad.clone(), layer.weight.grad.clone()
    y.backward()
    assert torch.equal(x.grad, 2 * first[0]) and torch.equal(layer.weight.grad, 2 * first[1])
