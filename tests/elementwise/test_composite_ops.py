"""Composite ops (softmax, norms, activations), forward and backward, bit-exact against the documented
decompositions written in numpy with an ml_dtypes bfloat16 cast after each step (np_rounded.py), and
close to float64 torch within a stated number of bf16 ulps."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import groupquant.elementwise as E

from . import np_rounded as R
from .test_basic_ops import _bits, data

F = np.float32
ONE, HALF = F(1.0), F(0.5)


def _run(fn, x, go, *params):
    tx = torch.tensor(x, requires_grad=True)
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    y = fn(tx, *tp)
    y.backward(torch.tensor(go))
    return y, tx.grad, [p.grad for p in tp]


@pytest.mark.parametrize("use_exp2", [False, True])
def test_softmax(use_exp2):
    x, go = data(seed=10, specials=False), data(seed=11, specials=False)
    x[1, :5] = [np.inf, 1.0, 2.0, 3.0, 4.0]
    x[2, :] = -1e30
    y, dx, _ = _run(lambda t: E.softmax(t, dim=1, use_exp2=use_exp2), x, go)
    qx, g = R.q(x), R.q(go)
    d = R.sub(qx, qx.max(1, keepdims=True))
    e = R.exp2(R.mul(d, R.c(R.LOG2E))) if use_exp2 else R.exp(d)
    want = R.mul(e, R.recip(R.sum(e, 1)))
    _bits(y, want)
    _bits(dx, R.mul(want, R.sub(g, R.sum(R.mul(g, want), 1))))


def _ln_ref(qx, g, axes, eps=F(1e-5)):
    mu = R.mean(qx, axes)
    xs = R.sub(qx, mu)
    var = R.mean(R.mul(xs, xs), axes)
    inv = R.recip(R.sqrt(R.add(var, eps)))
    xn = R.mul(xs, inv)
    dxs = R.mul(g, inv)
    dmu = R.mean(-dxs, axes)
    a = R.mean(R.mul(g, xs), axes)
    a = R.mul(R.mul(a, R.mul(inv, inv)), inv)
    return xn, R.add(R.add(dxs, R.mul(-a, xs)), dmu)


def test_layer_norm_with_affine():
    x, go = data(seed=12, specials=False), data(seed=13, specials=False)
    w, b = data((40,), seed=14, specials=False), data((40,), seed=15, specials=False)
    y, dx, (dw, db) = _run(lambda t, w_, b_: E.layer_norm(t, 40, w_, b_), x, go, w, b)
    qx, g, qw, qb = R.q(x), R.q(go), R.q(w), R.q(b)
    xn, _ = _ln_ref(qx, g, 1)
    _bits(y, R.add(R.mul(xn, qw), qb))
    gy = g
    dxn = R.mul(gy, qw)
    _, want_dx = _ln_ref(qx, dxn, 1)
    _bits(dx, want_dx)
    _bits(dw, R.sum(R.mul(gy, xn), 0).reshape(-1))
    _bits(db, R.sum(gy, 0).reshape(-1))


def test_rms_norm():
    x, go, w = data(seed=16, specials=False), data(seed=17, specials=False), data((40,), seed=18, specials=False)
    y, dx, (dw,) = _run(lambda t, w_: E.rms_norm(t, 40, w_, eps=1e-6), x, go, w)
    qx, g, qw = R.q(x), R.q(go), R.q(w)
    inv = R.recip(R.sqrt(R.add(R.mean(R.mul(qx, qx), 1), F(1e-6))))
    xn = R.mul(qx, inv)
    _bits(y, R.mul(xn, qw))
    dxn = R.mul(g, qw)
    a = R.mean(R.mul(dxn, xn), 1)
    _bits(dx, R.mul(R.sub(dxn, R.mul(xn, a)), inv))
    _bits(dw, R.sum(R.mul(g, xn), 0).reshape(-1))


def test_group_norm_and_batch_norm():
    x, go = data((4, 6, 5), seed=19, specials=False), data((4, 6, 5), seed=20, specials=False)
    qx, g = R.q(x), R.q(go)
    y, dx, _ = _run(lambda t: E.group_norm(t, 3), x, go)
    xn, want_dx = _ln_ref(qx.reshape(4, 3, 10), g.reshape(4, 3, 10), 2)
    _bits(y, xn)
    _bits(dx, want_dx)
    rm, rv = torch.zeros(6), torch.ones(6)
    y, dx, _ = _run(lambda t: E.batch_norm(t, rm, rv, training=True, momentum=0.5), x, go)
    xn, want_dx = _ln_ref(qx, g, (0, 2))
    _bits(y, xn)
    _bits(dx, want_dx)
    mu = R.mean(qx, (0, 2)).reshape(-1)
    np.testing.assert_allclose(rm.numpy(), 0.5 * mu, rtol=1e-6)
    y, dx, _ = _run(lambda t: E.batch_norm(t, rm, rv, training=False), x, go)
    inv = R.recip(R.sqrt(R.add(R.q(rv.numpy()).reshape(1, 6, 1), F(1e-5))))
    _bits(y, R.mul(R.sub(qx, R.q(rm.numpy()).reshape(1, 6, 1)), inv))
    _bits(dx, R.mul(g, inv))


def _sigmoid(qx):
    return R.recip(R.add(R.exp(-qx), ONE))


def test_sigmoid_silu_tanh_relu():
    x, go = data(seed=21), data(seed=22, specials=False)
    qx, g = R.q(x), R.q(go)
    s = _sigmoid(qx)
    y, dx, _ = _run(E.sigmoid, x, go)
    _bits(y, s)
    _bits(dx, R.mul(g, R.mul(s, R.sub(ONE, s))))
    y, dx, _ = _run(E.silu, x, go)
    ys = R.mul(qx, s)
    _bits(y, ys)
    _bits(dx, R.mul(g, R.add(s, R.mul(ys, R.sub(ONE, s)))))
    y, dx, _ = _run(E.relu, x, go)
    _bits(y, np.where(qx > 0, qx, np.where(np.isnan(qx), qx, F(0))))
    _bits(dx, np.where(qx > 0, g, F(0)))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    x, go = data(seed=23), data(seed=24, specials=False)
    qx, g = R.q(x), R.q(go)
    y, dx, _ = _run(lambda t: E.gelu(t, approximate), x, go)
    if approximate == "none":
        h = R.mul(R.add(R.erf(R.mul(qx, R.c(1 / math.sqrt(2)))), ONE), HALF)
        e = R.exp(R.mul(R.mul(qx, qx), F(-0.5)))
        d = R.mul(qx, R.mul(e, R.c(1 / math.sqrt(2 * math.pi))))
    else:
        c = R.mul(R.mul(R.mul(qx, qx), qx), R.c(0.044715))
        t = R.tanh(R.mul(R.add(qx, c), R.c(math.sqrt(2 / math.pi))))
        h = R.mul(R.add(t, ONE), HALF)
        s = R.sub(ONE, R.mul(t, t))
        v = R.mul(R.add(R.mul(R.mul(qx, qx), R.c(3 * 0.044715)), ONE), R.c(math.sqrt(2 / math.pi)))
        d = R.mul(R.mul(R.mul(s, v), qx), HALF)
    _bits(y, R.mul(qx, h))
    _bits(dx, R.mul(g, R.add(h, d)))


ULP_BOUNDS = [  # (name, op, float64 reference, bound in bf16 ulps of the output's magnitude scale)
    ("softmax", lambda t: E.softmax(t, -1), lambda t: torch.softmax(t, -1), 4),
    ("gelu", E.gelu, torch.nn.functional.gelu, 4),
    ("silu", E.silu, torch.nn.functional.silu, 4),
    ("layer_norm", lambda t: E.layer_norm(t, 64), lambda t: torch.nn.functional.layer_norm(t, (64,)), 8),
    ("rms_norm", lambda t: E.rms_norm(t, 64), lambda t: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6), 8),
]


@pytest.mark.parametrize("name,op,ref,ulps", ULP_BOUNDS)
def test_forward_and_backward_close_to_float64(name, op, ref, ulps):
    """Against float64 on the bf16-rounded input: |err| <= ulps * 2**-7 * max(|ref|, row scale)."""
    x = torch.tensor(R.q(np.random.default_rng(30).standard_normal((8, 64)).astype(F) * 2))
    go = torch.tensor(R.q(np.random.default_rng(31).standard_normal((8, 64)).astype(F)))
    xa = x.clone().requires_grad_(True)
    y = op(xa)
    y.backward(go)
    x64 = x.double().requires_grad_(True)
    y64 = ref(x64)
    y64.backward(go.double())
    for got, want in ((y, y64), (xa.grad, x64.grad)):
        scale = want.abs().amax(-1, keepdim=True).clamp(min=1e-30)
        err = (got.double() - want).abs() / scale
        assert err.max().item() <= ulps * 2.0 ** -7, (name, err.max().item())
