"""Basic element-wise ops (arithmetic, unary, reductions), forward and backward, bit-exact against the
numpy + ml_dtypes composition in np_rounded.py; and within 1 bf16 ulp of float64 for single ops."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import groupquant.elementwise as E

from . import np_rounded as R


def _bits(got: torch.Tensor, want: np.ndarray) -> None:
    g = got.detach().numpy().astype(np.float32).reshape(-1)
    w = np.asarray(want, dtype=np.float32)
    w = (w.reshape(-1) if w.size == g.size else np.broadcast_to(w, tuple(got.shape)).reshape(-1)).copy()
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(g.view(np.uint32)[ok], np.ascontiguousarray(w).view(np.uint32)[ok])


def data(shape=(6, 40), seed=0, specials=True) -> np.ndarray:
    """float32 data: normal values, bf16 ties (1 + 2**-8 patterns), large and tiny magnitudes, NaN/Inf."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(3)
    flat = x.reshape(-1)
    extra = [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(2 + 2 ** -7), 3.0e38, -1e30, 1e-39, -2.0 ** -130, 0.0, -0.0, 7.0]
    if specials:
        extra += [np.inf, -np.inf, np.nan]
    flat[: len(extra)] = extra
    return x


BINARY = [("add", E.add, R.add), ("sub", E.sub, R.sub), ("mul", E.mul, R.mul), ("div", E.div, R.div)]


@pytest.mark.parametrize("name,op,ref", BINARY)
@pytest.mark.parametrize("b_shape", [(6, 40), (40,), (6, 1)])
def test_binary_forward_backward(name, op, ref, b_shape):
    a = data(seed=1)
    b = data(seed=2)[: b_shape[0], : b_shape[-1]].reshape(b_shape) if len(b_shape) == 2 else data(seed=2)[0]
    go = data(seed=3, specials=False)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    y = op(ta, tb)
    qa, qb, g = R.q(a), R.q(b), R.q(go)
    _bits(y, ref(qa, qb))
    y.backward(torch.tensor(go))
    if name == "add":
        da, db = g, g
    elif name == "sub":
        da, db = g, -g
    elif name == "mul":
        da, db = R.mul(g, qb), R.mul(g, qa)
    else:
        da = R.div(g, qb)
        db = -R.mul(da, ref(qa, qb))
    axes = tuple(i for i in range(2) if b.ndim < 2 and i == 0 or (b.ndim == 2 and b.shape[i] == 1))
    want_db = db if b.shape == a.shape else R.sum(db, axes, keepdims=True).reshape(b.shape)
    _bits(ta.grad, da)
    _bits(tb.grad, want_db)


UNARY = {
    "exp": (E.exp, R.exp, lambda x, y, g: R.mul(g, y)),
    "exp2": (E.exp2, R.exp2, lambda x, y, g: R.mul(R.mul(g, y), R.c(R.LN2))),
    "log": (E.log, R.log, lambda x, y, g: R.div(g, x)),
    "sqrt": (E.sqrt, R.sqrt, lambda x, y, g: R.mul(R.div(g, y), np.float32(0.5))),
    "rsqrt": (E.rsqrt, R.rsqrt, lambda x, y, g: R.mul(R.mul(g, R.mul(R.mul(y, y), y)), np.float32(-0.5))),
    "reciprocal": (E.reciprocal, R.recip, lambda x, y, g: -R.mul(g, R.mul(y, y))),
    "erf": (E.erf, R.erf, lambda x, y, g: R.mul(g, R.mul(R.exp(-R.mul(x, x)), R.c(2 / np.sqrt(np.pi))))),
    "tanh": (E.tanh, R.tanh, lambda x, y, g: R.mul(g, R.sub(np.float32(1), R.mul(y, y)))),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_forward_backward(name):
    op, ref, dref = UNARY[name]
    x, go = data(seed=4), data(seed=5, specials=False)
    if name in ("log", "sqrt", "rsqrt"):
        x = np.abs(x)
    tx = torch.tensor(x, requires_grad=True)
    y = op(tx)
    qx, g = R.q(x), R.q(go)
    _bits(y, ref(qx))
    y.backward(torch.tensor(go))
    _bits(tx.grad, dref(qx, ref(qx), g))


@pytest.mark.parametrize("p", [2.0, 3.0, 0.5, -1.5])
def test_pow(p):
    x, go = np.abs(data(seed=6)), data(seed=7, specials=False)
    tx = torch.tensor(x, requires_grad=True)
    y = E.pow(tx, p)
    qx, g = R.q(x), R.q(go)
    _bits(y, R.pow(qx, p))
    y.backward(torch.tensor(go))
    _bits(tx.grad, R.mul(g, R.mul(R.pow(qx, p - 1), R.c(p))))


@pytest.mark.parametrize("dim,keepdim", [(1, False), (0, True), ((0, 1), False), (None, False)])
def test_sum_mean_forward_backward(dim, keepdim):
    x = data(seed=8, specials=False)
    axis = (0, 1) if dim is None else dim
    for op, ref in ((E.sum, R.sum), (E.mean, R.mean)):
        tx = torch.tensor(x, requires_grad=True)
        y = op(tx, dim, keepdim)
        want = ref(R.q(x), axis, keepdims=True)
        _bits(y, want.reshape(y.shape))
        go = np.full(y.shape, 1 + 2 ** -6, dtype=np.float32) * np.float32(3)
        y.backward(torch.tensor(go))
        g = np.broadcast_to(R.q(go).reshape(want.shape), x.shape)
        n = x.size if dim is None else np.prod([x.shape[d] for d in (axis if isinstance(axis, tuple) else (axis,))])
        _bits(tx.grad, g if op is E.sum else R.div(g, np.float32(n)))


def test_amax_gradient_goes_to_first_maximum():
    x = torch.tensor([[1.0, 3.0, 3.001, 2.0], [5.0, -1.0, 0.0, 5.0]], requires_grad=True)
    y = E.amax(x, 1)
    assert y.tolist() == [3.0, 5.0]  # 3.001 rounds to 3 in bfloat16: a tie with x[0, 1]
    y.backward(torch.tensor([1.0, 2.0 + 2 ** -9]))
    assert x.grad.tolist() == [[0.0, 1.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]]
    z = torch.tensor([[1.0, 9.0], [2.0, 4.0]], requires_grad=True)
    E.amax(z).backward()
    assert z.grad.tolist() == [[0.0, 1.0], [0.0, 0.0]]


@pytest.mark.parametrize("op,f64", [(E.exp, np.exp), (E.tanh, np.tanh), (E.sqrt, np.sqrt), (E.reciprocal, lambda v: 1 / v)])
def test_single_ops_within_half_ulp_of_float64(op, f64):
    """One rounding of a (nearly) exact value: within half a bf16 ulp (+ float32 slack) of float64."""
    x = np.abs(data(seed=9, specials=False)) + np.float32(0.25)
    x = np.clip(x, 0.25, 60).astype(np.float32)
    qx = R.q(x).astype(np.float64)
    got = op(torch.tensor(x)).numpy().astype(np.float64)
    want = f64(qx)
    ulp = np.exp2(np.floor(np.log2(np.abs(want))) - 7)
    assert (np.abs(got - want) <= 0.5 * ulp * (1 + 2 ** -15)).all()


def test_other_precisions_and_errors():
    x = torch.tensor([1.0 + 2 ** -4, 3.0])
    assert E.add(x, 0.0, precision="e5m2").tolist() == [1.0, 3.0]
    assert E.mul(x, x, precision="fp16").tolist() == [(1 + 2 ** -4) ** 2, 9.0]
    with pytest.raises(ValueError, match="e9m7|exponent_bits"):
        E.add(x, x, precision="e9m7")
    with pytest.raises(TypeError, match="exponent must be a python number"):
        E.pow(x, torch.tensor(2.0))
    with pytest.raises(TypeError, match="at least one tensor"):
        E.add(1.0, 2.0)
