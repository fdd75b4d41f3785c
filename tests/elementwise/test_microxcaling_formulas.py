"""The rounding kit's ``formulas="microxcaling"``: microxcaling's norm backward formulas, running-statistics
update and unrounded saved operands, against torch's autograd and float compositions."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from groupquant import elementwise as ew
from groupquant.elementwise import RoundedMath
from groupquant.ops.precision import resolve_precision

BF16 = resolve_precision("bfloat16")
EXACT = RoundedMath(None, formulas="microxcaling")  # no rounding: the formulas alone


def _grads(fn, *tensors, grad):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    fn(*leaves).backward(grad)
    return [t.grad for t in leaves]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2 ** 16))
def test_layer_and_rms_norm_backward_are_the_gradients_without_rounding(seed):
    torch.manual_seed(seed)
    x, w, b, g = torch.randn(3, 5, 24) * 3, torch.randn(24), torch.randn(24), torch.randn(3, 5, 24)
    got = _grads(lambda x, w, b: ew.layer_norm(x, 24, w, b, 1e-5, precision=EXACT), x, w, b, grad=g)
    want = _grads(lambda x, w, b: F.layer_norm(x.double(), (24,), w.double(), b.double(), 1e-5), x, w, b,
                  grad=g.double())
    for p, q in zip(got, want):
        assert torch.allclose(p.double(), q.double(), rtol=1e-4, atol=1e-4)
    got = _grads(lambda x, w, b: ew.rms_norm(x, 24, w, 1e-5, precision=EXACT, bias=b), x, w, b, grad=g)
    want = _grads(lambda x, w, b: F.rms_norm(x.double(), (24,), w.double(), 1e-5) + b.double(), x, w, b,
                  grad=g.double())
    for p, q in zip(got, want):
        assert torch.allclose(p.double(), q.double(), rtol=1e-4, atol=1e-4)


def test_the_formulas_differ_from_groupquants_once_rounded():
    torch.manual_seed(1)
    x, g = torch.randn(4, 64) * 3, torch.randn(4, 64)
    kit = RoundedMath(BF16)
    ours = _grads(lambda x: ew.layer_norm(x, 64, precision=kit), x, grad=g)[0]
    theirs = _grads(lambda x: ew.layer_norm(x, 64, precision=kit.with_settings(formulas="microxcaling")), x, grad=g)[0]
    assert not torch.equal(ours, theirs)
    with pytest.raises(ValueError, match="formulas"):
        RoundedMath(BF16, formulas="deepspeed")


def test_batch_norm_on_running_stats_takes_the_batch_statistics_backward():
    torch.manual_seed(2)
    x, g = torch.randn(6, 4, 5), torch.randn(6, 4, 5)
    rm, rv = torch.zeros(4), torch.ones(4)
    ours = _grads(lambda x: ew.batch_norm(x, rm, rv, training=False, precision=RoundedMath(None)), x, grad=g)[0]
    assert torch.allclose(ours, g / torch.sqrt(torch.tensor(1 + 1e-5)))  # the fixed statistics' gradient
    theirs = _grads(lambda x: ew.batch_norm(x, rm, rv, training=False, precision=EXACT), x, grad=g)[0]
    # microxcaling: dx = dxs - mean(dxs) - xs * mean(g * xs) / (var + eps) / sd over (N, L), with xs = x - running mean
    inv = 1 / torch.sqrt(torch.tensor(1 + 1e-5))
    dxs = g * inv
    want = dxs - dxs.mean((0, 2), keepdim=True) - x * (g * x).mean((0, 2), keepdim=True) * inv ** 3
    assert torch.allclose(theirs, want, atol=1e-6)


def test_running_statistics_update_with_the_variance_plus_eps():
    torch.manual_seed(3)
    x = torch.randn(8, 3, 4) * 2 + 1
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    want_m = 0.9 * rm + 0.1 * x.mean((0, 2))
    want_v = 0.9 * rv + 0.1 * (x.var((0, 2), unbiased=False) + 1e-5)
    ew.batch_norm(x, rm, rv, training=True, momentum=0.1, eps=1e-5, precision=EXACT)
    assert torch.allclose(rm, want_m, atol=1e-6) and torch.allclose(rv, want_v, atol=1e-6)


def test_mul_saves_unrounded_operands_for_a_gradient_kit_that_rounds_nothing():
    torch.manual_seed(4)
    a, b, g = torch.randn(16) * 3, torch.randn(16) * 3, torch.randn(16)
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731  torch's cast, round to nearest even
    theirs = RoundedMath(BF16, formulas="microxcaling", grad=RoundedMath(None, formulas="microxcaling"))
    da, db = _grads(lambda a, b: ew.mul(a, b, precision=theirs), a, b, grad=g)
    assert torch.equal(da, g * b) and torch.equal(db, g * a)
    ours = RoundedMath(BF16, grad=RoundedMath(None))
    da, db = _grads(lambda a, b: ew.mul(a, b, precision=ours), a, b, grad=g)
    assert torch.equal(da, g * bf(b)) and torch.equal(db, g * bf(a))


def test_arithmetic_formulas_against_float_compositions():
    torch.manual_seed(5)
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731  torch's cast, round to nearest even
    kit = RoundedMath(BF16, formulas="microxcaling")
    a, b, g = torch.randn(4, 8) * 3, torch.randn(4, 8) * 3 + 0.5, torch.randn(4, 8) * 3
    c = 0.3  # not a bfloat16 value: used as given
    y = ew.add(a, c, precision=kit)
    assert torch.equal(y, bf(bf(a) + torch.tensor(c)))
    assert torch.equal(_grads(lambda t: ew.add(t, c, precision=kit), a, grad=g)[0], g)  # unrounded
    da, db = _grads(lambda s, t: ew.sub(s, t, precision=kit), a, b, grad=g)
    assert torch.equal(da, g) and torch.equal(db, bf(-g))
    da, db = _grads(lambda s, t: ew.div(s, t, precision=kit), a, b, grad=g)
    y = bf(bf(a) / bf(b))
    assert torch.equal(da, bf(bf(g) / bf(b))) and torch.equal(db, bf(bf(g) * bf(-y / bf(b))))
    broadcast = torch.randn(1, 8) * 3
    db = _grads(lambda s, t: ew.sub(s, t, precision=kit), a, broadcast, grad=g)[1]
    assert torch.equal(db, bf(bf(-g).sum(0, keepdim=True)))
    # groupquant's own formulas round a constant operand and use db = -q(da * y)
    assert not torch.equal(ew.add(a, c, precision=RoundedMath(BF16)), bf(bf(a) + torch.tensor(c)))


def test_split_adds_the_rounded_gradients():
    torch.manual_seed(6)
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    x = torch.randn(16, requires_grad=True)
    g1, g2 = torch.randn(16) * 3, torch.randn(16) * 3
    y1, y2 = ew.split(x, precision=RoundedMath(BF16))
    assert torch.equal(y1, x) and torch.equal(y2, x)
    torch.autograd.backward((y1, y2), (g1, g2))
    assert torch.equal(x.grad, bf(bf(g1) + bf(g2)))
    x.grad = None
    y1, _ = ew.split(x, precision=RoundedMath(BF16))
    y1.backward(g1)
    assert torch.equal(x.grad, g1)
