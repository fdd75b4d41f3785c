"""Exact exponent helpers: floor_log2 / significand against math.frexp, exp2i against math.ldexp."""
from __future__ import annotations

import math

import numpy as np
import torch

from groupquant.ops.bits import exp2i, floor_log2, significand


def _sample_float32() -> np.ndarray:
    """Positive float32 values across the whole range: random bit patterns plus every edge of every binade."""
    rng = np.random.default_rng(0)
    bits = rng.integers(1, 0x7F800000, size=4000, dtype=np.uint32)
    edges = []
    for e in range(-149, 128):
        p = np.float32(math.ldexp(1.0, e))
        edges += [p, np.nextafter(p, np.float32(0)), np.nextafter(p, np.float32(np.inf))]
    vals = np.concatenate([bits.view(np.float32), np.array(edges, dtype=np.float32)])
    return vals[np.isfinite(vals) & (vals > 0)]


def test_floor_log2_and_significand_are_exact_everywhere():
    v = _sample_float32()
    t = torch.from_numpy(np.concatenate([v, -v]))
    want = np.array([math.frexp(float(a))[1] - 1 for a in v], dtype=np.int64)
    fl = floor_log2(t)
    assert fl.dtype == torch.int32
    np.testing.assert_array_equal(fl.numpy().astype(np.int64), np.concatenate([want, want]))
    sig = significand(t).numpy().astype(np.float64)
    both, exps = np.concatenate([v, v]).astype(np.float64), np.concatenate([want, want])
    np.testing.assert_array_equal(sig, both / np.ldexp(1.0, exps))
    assert ((sig >= 1) & (sig < 2)).all()


def test_floor_log2_just_below_powers_of_two():
    for k in (-126, -10, 0, 1, 8, 100, 127):
        below = np.nextafter(np.float32(2.0 ** k), np.float32(0))
        assert floor_log2(torch.tensor([below])).item() == k - 1
        assert floor_log2(torch.tensor([np.float32(2.0 ** k)])).item() == k


def test_exp2i_every_exponent():
    k = torch.arange(-149, 128)
    got = exp2i(k)
    assert got.dtype == torch.float32
    want = np.array([math.ldexp(1.0, int(i)) for i in k], dtype=np.float64).astype(np.float32)
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))
