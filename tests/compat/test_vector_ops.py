"""Softmax, GELU, LayerNorm, RMSNorm and simd ops against microxcaling's documented decompositions,
composed here with torch's bfloat16 cast (round to nearest even) as the rounding after each step."""
from __future__ import annotations

import torch

from groupquant.compat.microxcaling import (GELU, LayerNorm, MxSpecs, RMSNorm, gelu, leaky_relu, relu6, simd_add,
                                            simd_div,
                                            simd_reduce_mean, softmax)


def q(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).float()


SPECS = MxSpecs(bfloat=16, round="even")


def _x(seed: int, *shape: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(*shape) * 2


def test_softmax_forward_and_backward():
    x = _x(0, 4, 33).requires_grad_()
    xr = q(x.detach())
    e = q(torch.exp(q(xr - xr.amax(-1, keepdim=True))))
    y_expect = q(e / q(e.sum(-1, keepdim=True)))
    y = softmax(x, -1, mx_specs=SPECS)
    assert torch.equal(y, y_expect)
    g = _x(1, 4, 33)
    y.backward(g)
    gq = q(g)
    assert torch.equal(x.grad, q(y_expect * q(gq - q(q(gq * y_expect).sum(-1, keepdim=True)))))


def test_softmax_exp2_and_recip_options():
    x = _x(2, 3, 16)
    xr = q(x)
    s = q(xr - xr.amax(-1, keepdim=True))
    e = q(torch.exp2(s))
    inv = q(1.0 / q(e.sum(-1, keepdim=True)))
    got = softmax(x, -1, mx_specs=MxSpecs(bfloat=16, round="even", softmax_exp2=True, vec_use_recip=True))
    assert torch.equal(got, q(e * inv))


def test_gelu_is_microxcaling_tanh_form():
    x = _x(3, 5, 40)
    xr = q(x)
    arg = q(1.59375 * q(q(0.044677734 * q(q(xr * xr) * xr)) + xr))
    phi = q(1.0 / q(q(torch.exp(-arg)) + 1.0))
    assert torch.equal(gelu(x, mx_specs=SPECS), q(xr * phi))
    assert torch.equal(GELU(mx_specs=SPECS)(x), q(xr * phi))
    assert torch.allclose(gelu(x, mx_specs=SPECS), torch.nn.functional.gelu(x, approximate="tanh"), atol=0.05)


def test_layer_norm_forward():
    x = _x(4, 6, 48)
    layer = LayerNorm(48, mx_specs=SPECS)
    with torch.no_grad():
        layer.weight.copy_(_x(5, 48)), layer.bias.copy_(_x(6, 48))
    xr = q(x)
    mean = q(q(xr.sum(-1, keepdim=True)) / 48)
    shift = q(xr - mean)
    var = q(q(q(shift * shift).sum(-1, keepdim=True)) / 48)
    inv = q(1.0 / q(torch.sqrt(q(var + 1e-12))))
    expect = q(q(q(layer.weight.detach()) * q(shift * inv)) + q(layer.bias.detach()))
    assert torch.equal(layer(x), expect)


def test_rms_norm_forward_and_backward_runs():
    x = _x(7, 6, 48).requires_grad_()
    layer = RMSNorm(48, eps=1e-6, mx_specs=SPECS)
    xr = q(x.detach())
    ms = q(q(q(xr * xr).sum(-1, keepdim=True)) / 48)
    inv = q(1.0 / q(torch.sqrt(q(ms + 1e-6))))
    y = layer(x)
    assert torch.equal(y, q(q(xr * inv) + 0.0))  # weight 1, bias 0
    y.sum().backward()
    assert x.grad.shape == x.shape and torch.isfinite(x.grad).all()


def test_simd_ops():
    a, b = _x(8, 3, 8), _x(9, 8).abs() + 0.5
    assert torch.equal(simd_add(a, b, mx_specs=SPECS), q(q(a) + q(b)))
    assert torch.equal(simd_div(a, b, mx_specs=SPECS), q(q(a) / q(b)))
    assert torch.equal(simd_reduce_mean(a, 1, mx_specs=SPECS), q(q(q(a).sum(1)) * (1.0 / 8)))
    a.requires_grad_(), b.requires_grad_()
    simd_add(a, b, mx_specs=SPECS).backward(torch.ones(3, 8))
    assert torch.equal(b.grad, torch.full((8,), 3.0))  # broadcast operand: summed gradient


def test_relu6_and_leaky_relu():
    x = (_x(10, 4, 16) * 4).requires_grad_()
    xr = q(x.detach())
    y = leaky_relu(x, 0.1, mx_specs=SPECS)
    assert torch.equal(y, q(torch.nn.functional.leaky_relu(xr, 0.1)))
    g = _x(11, 4, 16)
    y.backward(g)
    assert torch.equal(x.grad, torch.where(y.detach() > 0, q(g), q(q(g) * 0.1)))
    assert torch.equal(relu6(x.detach(), mx_specs=SPECS), q(torch.nn.functional.relu6(x.detach())))
