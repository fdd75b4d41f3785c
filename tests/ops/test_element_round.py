"""Element rounding: against ml_dtypes casts (even) and a float64 grid oracle (nearest, floor), ties,
saturation, NaN/Inf, unsigned and generic formats, and stochastic rounding's statistics."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import mx_oracle
from ml_dtype_cases import FLOAT_CASES
from groupquant.formats import FloatFormat, IntFormat, SpecialValues, get_format
from groupquant.ops import round_to_format
from groupquant.ops.element_round import uniform_from_hash

FLOATS = FLOAT_CASES  # (label, groupquant format, ml_dtypes type)
FLOAT_IDS = [c[0] for c in FLOATS]


def dense_inputs() -> np.ndarray:
    """float32 test points: every finite bf16 and fp16 value, plus random float32 of all magnitudes."""
    rng = np.random.default_rng(3)
    bf = mx_oracle.all_bf16()
    hf = mx_oracle.all_fp16()
    r = rng.integers(0, 0xFFFFFFFF, size=20000, dtype=np.uint32).view(np.float32)
    v = np.concatenate([bf, hf, r])
    return v[np.isfinite(v)]


DENSE = dense_inputs()
SPARSE = DENSE[::5].copy()  # a fifth of the points (every binade still covered) for the many-mode grid checks


def same_bits(got: torch.Tensor, want: np.ndarray) -> np.ndarray:
    """Indices where float32 ``got`` and ``want`` differ bit for bit (sign of zero included); NaN must match NaN."""
    g = got.numpy()
    w = np.asarray(want, dtype=np.float64).astype(np.float32)
    assert g.dtype == np.float32
    nan = np.isnan(w)
    np.testing.assert_array_equal(np.isnan(g), nan)
    bad = np.flatnonzero(g.view(np.uint32) != w.view(np.uint32)) if not nan.any() else \
        np.flatnonzero((g.view(np.uint32) != w.view(np.uint32)) & ~nan)
    return bad


def check(x: np.ndarray, got: torch.Tensor, want: np.ndarray) -> None:
    """Bit-for-bit equality of ``got`` with ``want``; the message names the first inputs that differ."""
    bad = same_bits(got, want)
    w = np.asarray(want, dtype=np.float64).astype(np.float32)
    assert bad.size == 0, f"{bad.size} mismatches, inputs {x[bad[:5]]}: got {got.numpy()[bad[:5]]} want {w[bad[:5]]}"


@pytest.mark.parametrize("label,fmt,dtype", FLOATS, ids=FLOAT_IDS)
def test_even_matches_ml_dtypes_cast_of_clamped_value(label, fmt, dtype):
    clamped = np.clip(DENSE, -fmt.max_normal, fmt.max_normal)
    want = clamped.astype(dtype).astype(np.float32)
    check(DENSE, round_to_format(torch.from_numpy(DENSE), fmt, "even"), want)


def test_even_int8_matches_numpy_round_half_even():
    fmt = get_format("int8")
    want = np.round(np.clip(DENSE.astype(np.float64) * 64, -127, 127)) / 64 + 0.0  # + 0.0: integers have no -0
    check(DENSE, round_to_format(torch.from_numpy(DENSE), fmt, "even"), want)


@pytest.mark.parametrize("rounding", ["even", "nearest", "floor"])
@pytest.mark.parametrize("label,fmt,dtype", FLOATS, ids=FLOAT_IDS)
def test_float_rounding_matches_grid_oracle(label, fmt, dtype, rounding):
    grid = mx_oracle.ml_positive_grid(dtype)
    fnuz = fmt.special_values is SpecialValues.FNUZ  # no -0: a negative value rounding to zero gives +0
    want = mx_oracle.round_grid(SPARSE, grid, rounding, negative_zero=not fnuz)
    check(SPARSE, round_to_format(torch.from_numpy(SPARSE), fmt, rounding), want)


INTS = [IntFormat(8), IntFormat(4), IntFormat(2), IntFormat(8, narrow_range=False), IntFormat(6, frac_bits=0),
        IntFormat(8, signed=False), IntFormat(16)]


@pytest.mark.parametrize("rounding", ["even", "nearest", "floor"])
@pytest.mark.parametrize("fmt", INTS, ids=lambda f: f"{f.name}_q{f.qmin}_f{f.frac_bits}")
def test_int_rounding_matches_grid_oracle(fmt, rounding):
    # an integer grid is symmetric only when narrow; check the two halves against their own grids
    pos = np.arange(0, fmt.qmax + 1) * 2.0 ** -fmt.frac_bits
    neg = np.arange(0, -fmt.qmin + 1) * 2.0 ** -fmt.frac_bits
    x = SPARSE[np.abs(SPARSE) < 4 * fmt.max_normal + 1]
    want = np.where(x >= 0, mx_oracle.round_grid(x, pos, rounding, negative_zero=False),
                    mx_oracle.round_grid(x, neg, rounding, negative_zero=False))
    if not fmt.signed:
        want = np.where(x < 0, 0.0, want)
    check(x, round_to_format(torch.from_numpy(x), fmt, rounding), want)  # integers have no -0: +0 bits


@pytest.mark.parametrize("rounding", ["even", "nearest", "floor"])
@pytest.mark.parametrize("fmt", [FloatFormat(3, 3), FloatFormat(5, 4), FloatFormat(2, 2, SpecialValues.NAN_ONLY),
                                 FloatFormat(4, 3, SpecialValues.NONE), FloatFormat(3, 0), FloatFormat(4, 2, bias=3),
                                 FloatFormat(4, 4, signed=False), FloatFormat(3, 2, SpecialValues.IEEE, signed=False)],
                         ids=str)
def test_generic_float_rounding_matches_grid_oracle(fmt, rounding):
    grid = mx_oracle.minifloat_positive_grid(fmt.exponent_bit_width, fmt.mantissa_bit_width, fmt.bias, fmt.max_normal)
    assert grid[-1] == fmt.max_normal
    want = mx_oracle.round_grid(SPARSE, grid, rounding, signed=fmt.signed, negative_zero=fmt.signed)
    check(SPARSE, round_to_format(torch.from_numpy(SPARSE), fmt, rounding), want)


def test_oracle_tie_rule_for_zero_mantissa_agrees_with_ml_dtypes_e8m0():
    """Self-check of the oracle's tie rule on the one zero-mantissa type ml_dtypes has (E8M0)."""
    grid = np.ldexp(1.0, np.arange(-127, 128))
    normal = grid[1:-1]  # float32-normal inputs only (ml_dtypes treats float32 subnormal inputs its own way)
    x = np.concatenate([normal * 1.5, normal * 1.25, normal * 1.75]).astype(np.float32)
    want = x.astype(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    np.testing.assert_array_equal(mx_oracle.round_grid(x, np.concatenate([[0.0], grid]), "even"), want)


# Hand-built ties: (format, input, even, nearest (ties away), floor (toward zero))
TIES = [
    ("fp8_e4m3", 1.0625, 1.0, 1.125, 1.0),  # between 1.000b (even) and 1.001b
    ("fp8_e4m3", 1.1875, 1.25, 1.25, 1.125),  # between 1.001b and 1.010b (even)
    ("fp8_e4m3", -1.0625, -1.0, -1.125, -1.0),
    ("fp8_e4m3", 2.0 ** -10, 0.0, 2.0 ** -9, 0.0),  # half the smallest subnormal
    ("fp8_e4m3", 3 * 2.0 ** -10, 2.0 ** -8, 2.0 ** -8, 2.0 ** -9),  # between subnormal codes 1 and 2
    ("fp8_e4m3", 464.0, 448.0, 448.0, 448.0),  # beyond max normal: saturates in every mode
    ("fp8_e4m3", 440.0, 448.0, 448.0, 416.0),  # between 416 (1.101b) and 448 (1.110b, even)
    ("fp8_e5m2", 1.125, 1.0, 1.25, 1.0),
    ("fp8_e5m2", 61440.0, 57344.0, 57344.0, 57344.0),
    ("fp4_e2m1", 0.25, 0.0, 0.5, 0.0),
    ("fp4_e2m1", 0.75, 1.0, 1.0, 0.5),
    ("fp4_e2m1", 2.5, 2.0, 3.0, 2.0),
    ("fp4_e2m1", 3.5, 4.0, 4.0, 3.0),
    ("fp4_e2m1", 5.0, 4.0, 6.0, 4.0),
    ("fp4_e2m1", -5.0, -4.0, -6.0, -4.0),
    ("fp4_e2m1", 7.0, 6.0, 6.0, 6.0),
    ("fp6_e2m3", 1.0625, 1.0, 1.125, 1.0),
    ("fp6_e3m2", 26.0, 24.0, 28.0, 24.0),
    ("int8", 1.5 / 64, 2 / 64, 2 / 64, 1 / 64),
    ("int8", 2.5 / 64, 2 / 64, 3 / 64, 2 / 64),
    ("int8", -2.5 / 64, -2 / 64, -3 / 64, -2 / 64),
    ("int8", 127.5 / 64, 127 / 64, 127 / 64, 127 / 64),
    ("int8", -128 / 64, -127 / 64, -127 / 64, -127 / 64),  # -128 is unused (symmetric)
]


@pytest.mark.parametrize("fmt,x,even,nearest,floor", TIES)
def test_hand_built_ties_and_saturation(fmt, x, even, nearest, floor):
    f = get_format(fmt)
    t = torch.tensor([x], dtype=torch.float32)
    assert t.item() == x
    assert round_to_format(t, f, "even").item() == even
    assert round_to_format(t, f, "nearest").item() == nearest
    assert round_to_format(t, f, "floor").item() == floor


@pytest.mark.parametrize("rounding", ["even", "nearest", "floor", "stochastic"])
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "int8"])
def test_nan_stays_nan_and_inf_saturates(fmt, rounding):
    f = get_format(fmt)
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.0e38, -3.0e38])
    noise = torch.full_like(x, 0.5) if rounding == "stochastic" else None
    out = round_to_format(x, f, rounding, noise)
    assert torch.isnan(out[0])
    assert out[1:].tolist() == [f.max_normal, -f.max_normal, f.max_normal, -f.max_normal]


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp4_e2m1", "int8", "fp6_e3m2"])
def test_grid_values_are_fixed_points_in_every_mode(fmt):
    f = get_format(fmt)
    v = f.values().float()
    for rounding in ("even", "nearest", "floor"):
        assert torch.equal(round_to_format(v, f, rounding), v)
    for noise_value in (0.0, 0.5, 1.0 - 2.0 ** -24):
        assert torch.equal(round_to_format(v, f, "stochastic", torch.full_like(v, noise_value)), v)


def test_stochastic_noise_extremes_give_round_up_and_round_down():
    f = get_format("fp8_e4m3")
    x = SPARSE[(np.abs(SPARSE) < 400) & (np.abs(SPARSE) > 2.0 ** -9)]
    grid = mx_oracle.ml_positive_grid(ml_dtypes.float8_e4m3fn)
    lo, hi = mx_oracle.neighbours(x, grid)
    t = torch.from_numpy(x)
    down = round_to_format(t, f, "stochastic", torch.full_like(t, 1.0 - 2.0 ** -24)).numpy()
    up = round_to_format(t, f, "stochastic", torch.zeros_like(t)).numpy()
    np.testing.assert_array_equal(np.abs(up), hi.astype(np.float32))
    np.testing.assert_array_equal(np.abs(down), lo.astype(np.float32))


def test_stochastic_needs_noise():
    with pytest.raises(ValueError, match="noise"):
        round_to_format(torch.tensor([1.3]), get_format("fp8_e4m3"), "stochastic")


def test_unknown_rounding_names_the_argument():
    with pytest.raises(ValueError, match="rounding"):
        round_to_format(torch.tensor([1.3]), get_format("fp8_e4m3"), "banker")
    with pytest.raises(ValueError, match="rounding"):
        round_to_format(torch.tensor([1.3]), get_format("int8"), "up")


@pytest.mark.parametrize("fmt,dtype", [("fp4_e2m1", ml_dtypes.float4_e2m1fn), ("fp8_e4m3", ml_dtypes.float8_e4m3fn),
                                       ("int8", None)])
def test_stochastic_is_unbiased_over_many_seeds(fmt, dtype):
    f = get_format(fmt)
    rng = np.random.default_rng(4)
    x = (rng.random(512) * 2 - 1) * f.max_normal
    x = x.astype(np.float32)
    grid = mx_oracle.ml_positive_grid(dtype) if dtype else np.arange(128) / 64.0
    lo, hi = mx_oracle.neighbours(x, grid)
    idx = torch.arange(x.size, dtype=torch.int64)
    t = torch.from_numpy(x)
    seeds = range(300)
    outs = np.stack([round_to_format(t, f, "stochastic", uniform_from_hash(idx, s)).numpy() for s in seeds])
    mag = np.abs(outs).astype(np.float64)
    assert np.all((mag == lo) | (mag == hi)), "stochastic rounding left the two neighbours"
    step = hi - lo
    p = np.where(step > 0, (np.abs(x) - lo) / np.where(step > 0, step, 1), 0.0)
    n = len(seeds)
    mean = outs.astype(np.float64).mean(axis=0)
    se = step * np.sqrt(p * (1 - p) / n)
    dev = np.abs(mean - x)
    # every value within 5 standard errors of its expectation, and the pooled z-score near 0
    assert np.all(dev <= 5 * se + 1e-12)
    z = np.where(se > 0, (mean - x) / np.where(se > 0, se, 1), 0.0)
    assert abs(z.sum() / np.sqrt((se > 0).sum())) < 4


def test_stochastic_is_deterministic_per_seed_and_differs_between_seeds():
    f = get_format("fp4_e2m1")
    x = torch.linspace(-5.9, 5.9, 1000)
    idx = torch.arange(1000)
    a = round_to_format(x, f, "stochastic", uniform_from_hash(idx, 7))
    b = round_to_format(x, f, "stochastic", uniform_from_hash(idx, 7))
    c = round_to_format(x, f, "stochastic", uniform_from_hash(idx, 8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def _fmix_reference(index: int, seed: int) -> float:
    """The documented hash in plain Python integers: murmur3 fmix32 of index * 0x9E3779B9 + seed (mod 2**32)."""
    m = 0xFFFFFFFF
    h = (index * 0x9E3779B9 + (seed & m)) & m
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return (h >> 8) / 2.0 ** 24


def test_uniform_from_hash_matches_its_definition_and_is_uniform():
    idx = torch.cat([torch.arange(4096), torch.tensor([2 ** 31 - 1, 2 ** 32, 2 ** 32 + 5, 2 ** 40 + 3, 2 ** 62])])
    for seed in (0, 1, 12345, 2 ** 32 - 1, -1):
        u = uniform_from_hash(idx, seed)
        assert u.dtype == torch.float32
        want = [_fmix_reference(int(i), seed) for i in idx]
        assert u.tolist() == want
    u = uniform_from_hash(torch.arange(1 << 16), 99).numpy()
    assert u.min() >= 0 and u.max() < 1
    counts = np.histogram(u, bins=16, range=(0, 1))[0]
    expected = u.size / 16
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 50  # 15 degrees of freedom: p ~ 1e-5
