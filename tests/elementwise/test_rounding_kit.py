"""The rounding kit's settings (library, division, exp_via_exp2, accumulate, constants, grad) and the
ops added for microxcaling (relu6, leaky_relu, gelu 'sigmoid' / 'quick'), against torch compositions
with torch's own bfloat16 cast (round to nearest even) after each step."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import groupquant.elementwise as E
from groupquant.elementwise import RoundedMath, resolve_precision

BF16 = resolve_precision("bfloat16")


def q(t: torch.Tensor) -> torch.Tensor:
    return t.float().to(torch.bfloat16).float()


def c(v: float) -> float:
    return float(q(torch.tensor(v)))


def _x(seed: int, *shape: int, scale: float = 3.0) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(*shape) * scale


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
@example(322)  # a row whose sum cancels: float64 and float32 accumulation round differently
def test_division_rule(seed):
    a, b = _x(seed, 64), _x(seed + 1, 64).abs() + 0.1
    assert torch.equal(RoundedMath(BF16).div(a, b), q(a / b))
    assert torch.equal(RoundedMath(BF16, division="reciprocal").div(a, b), q(a * q(1.0 / b)))
    row_sums = a.reshape(8, 8).double().sum(1).float()  # the kit's default accumulate="float64"
    assert torch.equal(RoundedMath(BF16, division="reciprocal").mean(a.reshape(8, 8), 1), q(q(row_sums) * q(torch.tensor(1 / 8))))
    assert torch.equal(RoundedMath(BF16, division="reciprocal", accumulate="float32").mean(a.reshape(8, 8), 1),
                       q(q(a.reshape(8, 8).sum(1)) * q(torch.tensor(1 / 8))))


def test_library_float32_and_float64():
    x = _x(0, 4096, scale=8.0)
    assert torch.equal(RoundedMath(BF16, library="float32").exp(x), q(torch.exp(x)))
    assert torch.equal(RoundedMath(BF16).exp(x), q(torch.exp(x.double()).float()))
    assert torch.equal(RoundedMath(None, library="float32").tanh(x), torch.tanh(x))  # None: no rounding


def test_exp_via_exp2_and_constants_precision():
    x = _x(1, 512)
    fp16 = resolve_precision("fp16")
    kit = RoundedMath(fp16, exp_via_exp2=True, constants=BF16)
    qh = lambda t: t.to(torch.float16).float()  # noqa: E731
    assert torch.equal(kit.exp(x), qh(torch.exp2(qh(x * c(math.log2(math.e))).double()).float()))
    own = RoundedMath(fp16, exp_via_exp2=True)  # constants None: rounded to the kit's precision
    assert torch.equal(own.exp(x), qh(torch.exp2(qh(x * float(qh(torch.tensor(math.log2(math.e))))).double()).float()))


def test_accumulate_float32_is_torch_sum_order():
    x = _x(2, 3, 1000, scale=100.0)
    assert torch.equal(RoundedMath(None, accumulate="float32").sum(x, 1), x.sum(1))
    assert torch.equal(RoundedMath(None).sum(x, 1), x.double().sum(1).float())


def test_bad_settings_are_named():
    for name, value in (("library", "float16"), ("division", "recip"), ("accumulate", "int")):
        with pytest.raises(ValueError, match=f"RoundedMath.{name}"):
            RoundedMath(BF16, **{name: value})
    with pytest.raises(TypeError, match="RoundedMath.grad"):
        RoundedMath(BF16, grad="bfloat16")


def test_gradient_kit_runs_the_backward():
    x = _x(3, 5, 40).requires_grad_()
    g = _x(4, 5, 40)
    kit = RoundedMath(BF16, grad=RoundedMath(None))
    y = E.tanh(x, precision=kit)
    y.backward(g)
    y = y.detach()
    assert torch.equal(y, q(torch.tanh(q(x.detach()).double()).float()))
    assert torch.equal(x.grad, g * (1.0 - y * y))  # float32, nothing rounded


def test_softmax_order_divide_reciprocal_and_base2():
    x = _x(5, 4, 33).requires_grad_()
    xr = q(x.detach())
    d = q(xr - xr.amax(-1, keepdim=True))
    e = q(torch.exp(d.double()).float())
    s = q(e.sum(-1, keepdim=True))
    assert torch.equal(E.softmax(x, -1, "bfloat16"), q(e * q(1.0 / s)))  # a precision: reciprocal
    assert torch.equal(E.softmax(x, -1, RoundedMath(BF16)), q(e / s))   # the kit's rule: divide
    e2 = q(torch.exp2(d.double()).float())
    y = E.softmax(x, -1, RoundedMath(BF16), base2=True)
    assert torch.equal(y, q(e2 / q(e2.sum(-1, keepdim=True))))
    g = _x(6, 4, 33)
    y.backward(g)
    yd, gq = y.detach(), q(g)
    assert torch.equal(x.grad, q(q(yd * q(gq - q(q(gq * yd).sum(-1, keepdim=True)))) * c(math.log(2.0))))


def test_relu6_and_leaky_relu():
    x = (_x(7, 4, 64) * 3).requires_grad_()
    y = E.relu6(x)
    assert torch.equal(y, torch.nn.functional.relu6(q(x.detach())))
    g = _x(8, 4, 64)
    y.backward(g)
    inside = (y > 0) & (y < 6)
    assert torch.equal(x.grad, torch.where(inside, q(g), torch.zeros_like(g)))
    x.grad = None
    y = E.leaky_relu(x, 0.1)
    xr = q(x.detach())
    assert torch.equal(y, torch.where(xr > 0, xr, q(xr * 0.1)))
    y.backward(g)
    assert torch.equal(x.grad, torch.where(y > 0, q(g), q(q(g) * 0.1)))


@pytest.mark.parametrize("quick", [False, True])
def test_gelu_sigmoid_forms(quick):
    x = _x(9, 5, 40).requires_grad_()
    xr = q(x.detach())
    if quick:
        a = q(c(1.702) * xr)
    else:
        a = q(c(math.sqrt(8 / math.pi)) * q(q(c(0.044715) * q(q(xr * xr) * xr)) + xr))
    p = q(1.0 / q(q(torch.exp((-a).double()).float()) + 1.0))
    y = E.gelu(x, "quick" if quick else "sigmoid")
    assert torch.equal(y, q(xr * p))
    assert torch.allclose(y, torch.nn.functional.gelu(x.detach(), approximate="tanh"), atol=0.05 if not quick else 0.1)
    g = _x(10, 5, 40)
    y.backward(g)
    s = q(p * q(1.0 - p))
    if quick:
        s = q(c(1.702) * s)
    else:
        v = q(c(3 * 0.044715 * math.sqrt(8 / math.pi)) * q(xr * xr))
        s = q(q(c(math.sqrt(8 / math.pi)) + v) * s)
    assert torch.equal(x.grad, q(q(p + q(xr * s)) * q(g)))


def test_cast_rounds_value_and_gradient():
    x = _x(11, 3, 50).requires_grad_()
    g = _x(12, 3, 50)
    kit = RoundedMath(BF16, grad=RoundedMath(resolve_precision("fp16")))
    y = E.cast(x, precision=kit)
    y.backward(g)
    assert torch.equal(y, q(x.detach()))
    assert torch.equal(x.grad, g.to(torch.float16).float())
