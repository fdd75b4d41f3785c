"""Shared scales: exact hand-built cases per scale mode, clamping, zero/NaN/Inf groups, E8M0 codes."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

import mx_oracle
from groupquant.formats import get_format
from groupquant.ops import e8m0_decode, e8m0_encode, group_scale, shared_exponent

F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = 2.0 ** -149  # smallest float32 subnormal


def below(x: float) -> float:
    """The float32 just below x."""
    return float(np.nextafter(np.float32(x), np.float32(0)))


def above(x: float) -> float:
    """The float32 just above x."""
    return float(np.nextafter(np.float32(x), np.float32(np.inf)))


# (format, scale mode, amax, expected shared exponent), each worked out by hand from the mode's rule.
HAND = [
    # floor: floor(log2 amax) - emax, exponent from the bits (a float log2 says 1.0 for nextafter(2, 0)).
    ("fp8_e4m3", "floor", 1.0, -8), ("fp8_e4m3", "floor", below(2.0), -8), ("fp8_e4m3", "floor", 2.0, -7),
    ("fp8_e4m3", "floor", 448.0, 0), ("fp8_e4m3", "floor", below(512.0), 0), ("fp8_e4m3", "floor", 512.0, 1),
    ("fp8_e4m3", "floor", below(2.0 ** -20), -29), ("fp8_e4m3", "floor", below(2.0 ** 100), 91),
    ("fp4_e2m1", "floor", 6.0, 0), ("fp4_e2m1", "floor", below(8.0), 0), ("fp4_e2m1", "floor", 8.0, 1),
    ("fp4_e2m1", "floor", 1.0, -2), ("fp8_e5m2", "floor", 57344.0, 0), ("fp8_e5m2", "floor", 1.0, -15),
    ("fp6_e3m2", "floor", 28.0, 0), ("fp6_e3m2", "floor", 32.0, 1), ("fp6_e2m3", "floor", 7.5, 0),
    ("int8", "floor", 1.0, 0), ("int8", "floor", below(1.0), -1), ("int8", "floor", 127 / 64, 0),
    ("int8", "floor", 3.0, 1),
    # ceil: ceil(log2 amax) - emax; exact powers of two stay.
    ("fp8_e4m3", "ceil", 1.0, -8), ("fp8_e4m3", "ceil", above(1.0), -7), ("fp8_e4m3", "ceil", below(2.0), -7),
    ("fp8_e4m3", "ceil", 2.0, -7), ("fp8_e4m3", "ceil", 256.0, 0), ("fp8_e4m3", "ceil", 448.0, 1),
    ("fp4_e2m1", "ceil", 4.0, 0), ("fp4_e2m1", "ceil", above(4.0), 1), ("fp4_e2m1", "ceil", 6.0, 1),
    ("int8", "ceil", 1.0, 0), ("int8", "ceil", 1.5, 1),
    # even: amax rounded to the element mantissa (nearest-even) first; a carry into 2.0 bumps the binade.
    ("fp8_e4m3", "even", 1.875, -8),  # 1.111b: already 3 bits
    ("fp8_e4m3", "even", 1.9375, -7),  # 1.111|1: tie, 1.111 odd -> up to 10.000 (carry)
    ("fp8_e4m3", "even", 1.90625, -8),  # 1.111|01: below the tie
    ("fp8_e4m3", "even", 1.96875, -7),  # 1.111|11: above the tie
    ("fp8_e4m3", "even", 1.8125, -8),  # 1.110|1: tie, 1.110 even -> stays
    ("fp8_e4m3", "even", below(2.0), -7), ("fp8_e4m3", "even", 2.0, -7), ("fp8_e4m3", "even", 480.0, 0),
    ("fp8_e4m3", "even", 496.0, 1),  # 1.111|1 x 2^8: tie, odd -> carry
    ("fp4_e2m1", "even", 1.5, -2), ("fp4_e2m1", "even", 1.75, -1), ("fp4_e2m1", "even", 1.25, -2),
    ("fp4_e2m1", "even", 7.0, 1), ("fp4_e2m1", "even", 6.0, 0),
    ("fp8_e5m2", "even", 1.875, -14),  # 1.11|1: tie, 1.11 odd -> carry
    ("fp8_e5m2", "even", 1.625, -15),  # 1.10|1: tie, 1.10 even -> stays
    ("int8", "even", 127 / 64, 0), ("int8", "even", 255 / 128, 1),  # 1.111111|1: tie, odd -> carry
    ("int8", "even", 253 / 128, 0),  # 1.111110|1: tie, even -> stays
    # rceil: ceil(log2(amax / max_normal)), the smallest scale with amax / scale <= max_normal.
    ("fp8_e4m3", "rceil", 448.0, 0), ("fp8_e4m3", "rceil", above(448.0), 1), ("fp8_e4m3", "rceil", below(448.0), 0),
    ("fp8_e4m3", "rceil", 56.0, -3), ("fp8_e4m3", "rceil", 57.0, -2), ("fp8_e4m3", "rceil", 1.0, -8),
    ("fp8_e4m3", "rceil", 224.0, -1), ("fp8_e4m3", "rceil", 2.0, -7),
    ("fp4_e2m1", "rceil", 6.0, 0), ("fp4_e2m1", "rceil", above(6.0), 1), ("fp4_e2m1", "rceil", 3.0, -1),
    ("fp4_e2m1", "rceil", 7.0, 1), ("fp4_e2m1", "rceil", 1.0, -2), ("fp4_e2m1", "rceil", 1.5, -2),
    ("fp8_e5m2", "rceil", 57344.0, 0), ("fp8_e5m2", "rceil", 57345.0, 1),
    ("fp6_e2m3", "rceil", 7.5, 0), ("fp6_e2m3", "rceil", 8.0, 1), ("fp6_e3m2", "rceil", 29.0, 1),
    ("int8", "rceil", 127 / 64, 0), ("int8", "rceil", 2.0, 1), ("int8", "rceil", 1.0, 0),
    # clamping to E8M0's [-127, 127]; the top is capped at 127 - emax (floor's largest for float32
    # input), so ceil at F32_MAX gives 119, not 120, for e4m3 and the block saturates instead of overflowing
    ("fp8_e4m3", "floor", F32_TINY, -127), ("fp8_e4m3", "floor", 2.0 ** -119, -127),
    ("fp8_e4m3", "floor", 2.0 ** -118, -126), ("fp4_e2m1", "rceil", F32_TINY, -127),
    ("int8", "floor", 2.0 ** -127, -127), ("int8", "floor", 2.0 ** -128, -127), ("int8", "floor", 2.0 ** -126, -126),
    ("fp8_e4m3", "floor", F32_MAX, 119), ("fp8_e4m3", "ceil", F32_MAX, 119), ("fp4_e2m1", "floor", F32_MAX, 125),
    ("int8", "floor", F32_MAX, 127), ("int8", "ceil", F32_MAX, 127), ("int8", "rceil", F32_MAX, 127),
    ("int8", "even", F32_MAX, 127),
]


@pytest.mark.parametrize("fmt,mode,amax,want", HAND)
def test_hand_built_shared_exponents(fmt, mode, amax, want):
    f = get_format(fmt)
    a = torch.tensor([np.float32(amax)])
    assert float(a[0]) == amax  # the case is exactly representable
    assert shared_exponent(a, f, mode).item() == want
    scale, code = group_scale(a, f, mode)
    assert scale.dtype == torch.float32 and code.dtype == torch.uint8
    assert scale.item() == math.ldexp(1.0, want)
    assert code.item() == want + 127
    assert mx_oracle.shared_exponent(amax, mx_oracle.MX[fmt], mode) == want  # the oracle agrees with the hand


@pytest.mark.parametrize("fmt", list(mx_oracle.MX))
@pytest.mark.parametrize("k", [-100, -10, -1, 0, 1, 10, 100])
def test_rceil_at_and_just_above_max_normal_times_power_of_two(fmt, k):
    f = get_format(fmt)
    edge = math.ldexp(f.max_normal, k)
    cases = [(edge, k), (above(edge), k + 1), (below(edge), k)]
    got = shared_exponent(torch.tensor([c for c, _ in cases], dtype=torch.float32), f, "rceil").tolist()
    assert got == [w for _, w in cases]


@pytest.mark.parametrize("fmt", list(mx_oracle.MX))
@pytest.mark.parametrize("k", [-120, -30, -1, 0, 1, 30, 120])
def test_floor_and_ceil_around_exact_powers_of_two(fmt, k):
    f = get_format(fmt)
    p = math.ldexp(1.0, k)
    a = torch.tensor([below(p), p, above(p)], dtype=torch.float32)
    clamp = lambda e: max(-127, min(127, e))  # noqa: E731
    assert shared_exponent(a, f, "floor").tolist() == [clamp(k - 1 - f.emax), clamp(k - f.emax), clamp(k - f.emax)]
    assert shared_exponent(a, f, "ceil").tolist() == [clamp(k - f.emax), clamp(k - f.emax), clamp(k + 1 - f.emax)]


@pytest.mark.parametrize("mode", ["floor", "ceil", "even", "rceil", "float"])
@pytest.mark.parametrize("fmt", list(mx_oracle.MX))
def test_zero_nan_inf_groups(fmt, mode):
    f = get_format(fmt)
    amax = torch.tensor([0.0, float("nan"), float("inf"), 1.0])
    scale, code = group_scale(amax, f, mode)
    assert torch.isnan(scale[1:3]).all()
    assert not torch.isnan(scale[[0, 3]]).any()
    if mode == "float":
        assert scale[0].item() == 1.0
        assert code.tolist() == [0, 0, 0, 0]
    else:
        assert scale[0].item() == 2.0 ** -127
        assert code[:3].tolist() == [0, 0xFF, 0xFF]


@pytest.mark.parametrize("fmt", list(mx_oracle.MX))
def test_float_scale_mode_is_amax_over_max_normal(fmt):
    f = get_format(fmt)
    rng = np.random.default_rng(1)
    amax = (rng.random(500) * 10.0 ** rng.integers(-30, 30, 500)).astype(np.float32)
    scale, code = group_scale(torch.from_numpy(amax), f, "float")
    np.testing.assert_array_equal(scale.numpy(), amax / np.float32(f.max_normal))
    assert (code == 0).all()


def test_all_modes_match_oracle_on_random_amax():
    rng = np.random.default_rng(2)
    bits = rng.integers(1, 0x7F800000, size=1500, dtype=np.uint32)
    amax = np.concatenate([bits.view(np.float32), np.float32([1.0, 448.0, 6.0, 7.5, 28.0, 57344.0, 127 / 64])])
    for name, of in mx_oracle.MX.items():
        f = get_format(name)
        for mode in ("floor", "ceil", "even", "rceil"):
            got = shared_exponent(torch.from_numpy(amax), f, mode).numpy()
            want = [mx_oracle.shared_exponent(float(a), of, mode) for a in amax]
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {mode}")


def test_bad_scale_mode_names_the_argument():
    with pytest.raises(ValueError, match="scale_mode"):
        shared_exponent(torch.tensor([1.0]), get_format("fp8_e4m3"), "round")
    with pytest.raises(ValueError, match="scale_mode"):
        group_scale(torch.tensor([1.0]), get_format("fp8_e4m3"), "Floor")


def test_e8m0_decode_every_code_matches_ml_dtypes():
    codes = np.arange(256, dtype=np.uint8)
    want = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    got = e8m0_decode(torch.from_numpy(codes)).numpy()
    assert np.isnan(got[255]) and np.isnan(want[255])
    np.testing.assert_array_equal(got[:255].view(np.uint32), want[:255].view(np.uint32))


@pytest.mark.skipif(not hasattr(torch, "float8_e8m0fnu"), reason="torch has no float8_e8m0fnu")
def test_e8m0_decode_every_code_matches_torch():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    want = codes.view(torch.float8_e8m0fnu).float()
    got = e8m0_decode(codes)
    assert torch.isnan(got[255]) and torch.isnan(want[255])
    assert torch.equal(got[:255], want[:255])
    assert torch.equal(e8m0_encode(want[:255]), codes[:255])


def test_e8m0_encode_round_trips_every_code():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    scales = e8m0_decode(codes)
    assert torch.equal(e8m0_encode(scales), codes)
    ml = torch.from_numpy(scales.numpy().astype(ml_dtypes.float8_e8m0fnu).view(np.uint8))
    assert torch.equal(e8m0_encode(scales), ml)


@pytest.mark.parametrize("bad", [3.0, 0.0, -1.0, -2.0, float("inf"), 2.0 ** -128, 0.75])
def test_e8m0_encode_rejects_non_powers_of_two_and_out_of_range(bad):
    with pytest.raises(ValueError, match="power of two"):
        e8m0_encode(torch.tensor([1.0, bad]))


def test_e8m0_decode_needs_uint8():
    with pytest.raises(TypeError, match="uint8"):
        e8m0_decode(torch.tensor([127], dtype=torch.int32))


@pytest.mark.parametrize("mode", ["floor", "ceil", "even", "rceil"])
def test_exponent_cap_follows_the_input_dtype(mode):
    # float16's largest binade is 15, so fp4 (emax 2) may use at most 2**13 for float16 input;
    # float32 input of the same value keeps the uncapped exponent (14 for ceil/even/rceil)
    f = get_format("fp4_e2m1")
    a = torch.tensor([65504.0])
    fl = math.frexp(65504.0)[1] - 1  # 15
    uncapped = {"floor": fl - 2, "ceil": fl + 1 - 2, "even": fl + 1 - 2, "rceil": fl + 1 - 2}[mode]
    assert shared_exponent(a, f, mode).item() == uncapped
    assert shared_exponent(a, f, mode, torch.float16).item() == min(uncapped, 15 - 2)
    assert mx_oracle.shared_exponent(65504.0, mx_oracle.MX["fp4_e2m1"], mode, 15) == min(uncapped, 13)
