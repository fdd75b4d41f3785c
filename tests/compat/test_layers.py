"""Linear / matmul / conv with mx_specs against compositions of groupquant's fake_quant, float GEMMs
and torch's bfloat16 cast (microxcaling's documented order of rounding)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from groupquant import fake_quant
from groupquant.compat.microxcaling import Conv2d, Linear, bmm, conv2d, conv3d, finalize_mx_specs, linear, matmul


def bf(t: torch.Tensor) -> torch.Tensor:
    """bfloat16, round to nearest even (torch's cast: independent of groupquant)."""
    return t.to(torch.bfloat16).float()


def fq(t: torch.Tensor, fmt: str, dim: int, block: int = 32, rounding: str = "even") -> torch.Tensor:
    return fake_quant(t, fmt, block, dim=dim, rounding=rounding)


SPECS = dict(w_elem_format="fp4_e2m1", a_elem_format="fp8_e4m3", block_size=32, bfloat=16, round="even")


def test_linear_forward_is_bf_fq_bf_composition():
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 5, 64) * 2, torch.randn(24, 64), torch.randn(24)
    specs = finalize_mx_specs(dict(SPECS))
    expect = bf(bf(F.linear(fq(bf(x), "fp8_e4m3", -1), fq(bf(w), "fp4_e2m1", -1))) + bf(b))
    got = linear(x, w, b, mx_specs=specs)
    assert torch.equal(got, expect)
    layer = Linear(64, 24, mx_specs=specs)
    assert isinstance(layer, torch.nn.Linear)
    with torch.no_grad():
        layer.weight.copy_(w), layer.bias.copy_(b)
    assert torch.equal(layer(x), expect)
    # the composition is not trivially satisfied: without the bfloat rounding of the output it differs
    assert not torch.equal(got, F.linear(fq(bf(x), "fp8_e4m3", -1), fq(bf(w), "fp4_e2m1", -1)) + bf(b))
    plain = Linear(64, 24)  # mx_specs None: torch's linear
    assert torch.equal(plain(x), F.linear(x, plain.weight, plain.bias))


def test_linear_backward_formats_reach_their_gemm():
    torch.manual_seed(1)
    formats = dict(w_elem_format="fp8_e4m3", a_elem_format="fp8_e4m3", w_elem_format_bp="fp4_e2m1",
                   a_elem_format_bp="int8", a_elem_format_bp_ex="fp6_e3m2", a_elem_format_bp_os="fp8_e5m2",
                   block_size=32, round="even")
    specs = finalize_mx_specs(dict(formats))
    x = (torch.randn(64, 48) * 3).requires_grad_()
    w = torch.randn(40, 48).requires_grad_()
    g = torch.randn(64, 40)
    linear(x, w, mx_specs=specs).backward(g)
    # dX = dY W: dY in a_elem_format_bp_os along the outputs, W in w_elem_format_bp along dim 0
    assert torch.equal(x.grad, fq(g, "fp8_e5m2", -1) @ fq(w.detach(), "fp4_e2m1", 0))
    # dW = dY^T X: dY in a_elem_format_bp_ex, X in a_elem_format_bp, both along the tokens
    assert torch.equal(w.grad, fq(g, "fp6_e3m2", 0).t() @ fq(x.detach(), "int8", 0))
    assert not torch.equal(w.grad, fq(g, "fp8_e5m2", 0).t() @ fq(x.detach(), "int8", 0))


def test_linear_without_backprop_quantization_is_float_backward():
    specs = finalize_mx_specs(dict(SPECS, quantize_backprop=False))
    x = torch.randn(8, 64).requires_grad_()
    w = torch.randn(16, 64).requires_grad_()
    g = torch.randn(8, 16)
    linear(x, w, mx_specs=specs).backward(g)
    assert torch.allclose(x.grad, g @ w.detach()) and torch.allclose(w.grad, g.t() @ x.detach())


def test_matmul_and_bmm_forward():
    torch.manual_seed(2)
    a, b = torch.randn(2, 7, 64), torch.randn(2, 64, 9)
    specs = finalize_mx_specs(dict(SPECS))
    expect = bf(torch.matmul(fq(bf(a), "fp8_e4m3", -1), fq(bf(b), "fp8_e4m3", -2)))
    assert torch.equal(matmul(a, b, mx_specs=specs), expect)
    assert torch.equal(bmm(a, b, mx_specs=specs), expect)
    weight_side = bf(torch.matmul(fq(bf(a), "fp8_e4m3", -1), fq(bf(b), "fp4_e2m1", -2)))
    assert torch.equal(matmul(a, b, mx_specs=specs, mode_config="aw"), weight_side)
    with pytest.raises(ValueError, match="mode_config"):
        matmul(a, b, mx_specs=specs, mode_config="ww")


def test_matmul_backward_uses_bp_os_for_both_gradients():
    specs = finalize_mx_specs(dict(a_elem_format="fp8_e4m3", a_elem_format_bp="int8",
                                   a_elem_format_bp_os="fp8_e5m2", block_size=32, round="even"))
    a = torch.randn(6, 64).requires_grad_()
    b = torch.randn(64, 40).requires_grad_()
    g = torch.randn(6, 40)
    matmul(a, b, mx_specs=specs).backward(g)
    assert torch.equal(a.grad, fq(g, "fp8_e5m2", -1) @ fq(b.detach(), "int8", -1).t())
    assert torch.equal(b.grad, fq(a.detach(), "int8", -2).t() @ fq(g, "fp8_e5m2", -2))


def test_conv2d_forward_blocks_channels_and_rounds_nearest():
    torch.manual_seed(3)
    x, w, b = torch.randn(2, 8, 6, 6), torch.randn(4, 8, 3, 3), torch.randn(4)
    specs = finalize_mx_specs(dict(SPECS))
    qx = fq(bf(x), "fp8_e4m3", 1, rounding="nearest")
    qw = fq(bf(w), "fp4_e2m1", 1, rounding="nearest")
    expect = bf(F.conv2d(qx, qw, bf(b), padding=1))
    assert torch.equal(conv2d(x, w, b, padding=1, mx_specs=specs), expect)
    layer = Conv2d(8, 4, 3, padding=1, mx_specs=specs)
    with torch.no_grad():
        layer.weight.copy_(w), layer.bias.copy_(b)
    assert isinstance(layer, torch.nn.Conv2d) and torch.equal(layer(x), expect)


def test_conv3d_forward():
    torch.manual_seed(4)
    x, w = torch.randn(1, 8, 3, 4, 4), torch.randn(2, 8, 2, 2, 2)
    specs = finalize_mx_specs(dict(SPECS))
    expect = bf(F.conv3d(fq(bf(x), "fp8_e4m3", 1, rounding="nearest"), fq(bf(w), "fp4_e2m1", 1, rounding="nearest")))
    assert torch.equal(conv3d(x, w, mx_specs=specs), expect)
