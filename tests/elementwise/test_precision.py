"""round_to_precision: bit-exact against ml_dtypes casts (bfloat16, float16) and against a grid-search
oracle (tests/elementwise/precision_oracle.py) for other widths and options; settings and errors."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from groupquant.ops.precision import ElementPrecision, resolve_precision, round_to_precision

from .precision_oracle import edge_cases, oracle_round, random_patterns


def _bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    """Same bits, except that any NaN matches any NaN."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


def _ours(x: np.ndarray, precision) -> np.ndarray:
    return round_to_precision(torch.from_numpy(x.copy()), precision).numpy()


def _cast(x: np.ndarray, dtype) -> np.ndarray:
    with np.errstate(all="ignore"):
        return x.astype(dtype).astype(np.float32)


@pytest.mark.parametrize("name,dtype,e,m", [("bfloat16", ml_dtypes.bfloat16, 8, 7), ("fp16", np.float16, 5, 10)])
def test_matches_ml_dtypes_on_random_patterns_and_edges(name, dtype, e, m):
    x = np.concatenate([random_patterns(200_000, seed=1), edge_cases(e, m)])
    _bits_equal(_ours(x, name), _cast(x, dtype))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=64))
def test_matches_ml_dtypes_hypothesis(patterns):
    x = np.array(patterns, dtype=np.uint32).view(np.float32)
    _bits_equal(_ours(x, "bf16"), _cast(x, ml_dtypes.bfloat16))
    _bits_equal(_ours(x, "float16"), _cast(x, np.float16))


WIDTHS = [(2, 1), (3, 2), (4, 3), (5, 2), (8, 3), (6, 9), (5, 10), (8, 7), (7, 8), (8, 0), (8, 12)]


@pytest.mark.parametrize("e,m", WIDTHS)
def test_matches_grid_oracle_for_other_widths(e, m):
    x = np.concatenate([random_patterns(20_000, seed=e * 31 + m), edge_cases(e, m) if m < 12 else
                        np.array([1.0, np.nan], dtype=np.float32)])
    _bits_equal(_ours(x, ElementPrecision(e, m)), oracle_round(x, e, m))


@pytest.mark.parametrize("rounding", ["even", "nearest", "floor"])
@pytest.mark.parametrize("subnormals,flush", [(True, "input"), (False, "input"), (False, "output")])
@pytest.mark.parametrize("e,m", [(5, 2), (8, 7), (4, 5)])
def test_options_match_grid_oracle(e, m, rounding, subnormals, flush):
    x = np.concatenate([random_patterns(5_000, seed=7), edge_cases(e, m)])
    p = ElementPrecision(e, m, subnormals=subnormals, rounding=rounding, flush=flush)
    _bits_equal(_ours(x, p), oracle_round(x, e, m, subnormals, rounding, flush))


BF16_MAX = 2.0 ** 127 * (2 - 2.0 ** -7)


def test_hand_built_ties_overflow_and_subnormals_bf16():
    one = 1.0
    cases = {
        one + 2 ** -8: one,                    # tie, 1.0 is even
        one + 3 * 2 ** -8: one + 2 ** -6,      # tie, goes up to the even neighbour
        BF16_MAX + 2.0 ** 119: float("inf"),   # max bf16 + half ulp: the tie rounds to the Inf code
        BF16_MAX + 2.0 ** 119 - 2.0 ** 104: BF16_MAX,  # one float32 step below that threshold -> max normal
        2.0 ** -133: 2.0 ** -133,              # min bf16 subnormal kept
        2.0 ** -134: 0.0,                      # half of it: tie to even (0)
        -(2.0 ** -134) * 1.5: -(2.0 ** -133),  # above half: up
    }
    x = torch.tensor(list(cases), dtype=torch.float32)
    want = torch.tensor(list(cases.values()), dtype=torch.float32)
    got = round_to_precision(x, "bf16")
    assert torch.equal(got, want), (got, want)
    assert torch.signbit(round_to_precision(torch.tensor([-(2.0 ** -140)]), "bf16")).item()


def test_flush_rules_differ_just_below_min_normal():
    just_below = np.nextafter(np.float32(2.0 ** -14), np.float32(0))  # rounds up to fp16 min normal
    x = torch.tensor([just_below, -just_below])
    assert round_to_precision(x, ElementPrecision(5, 10, subnormals=False, flush="input")).tolist() == [0.0, -0.0]
    assert round_to_precision(x, ElementPrecision(5, 10, subnormals=False, flush="output")).tolist() == [
        2.0 ** -14, -(2.0 ** -14)]


def test_names_and_mx_specs():
    assert resolve_precision("bfloat16") == resolve_precision("BF16") == ElementPrecision(8, 7)
    assert resolve_precision("float16") == resolve_precision("fp16") == ElementPrecision(5, 10)
    assert resolve_precision("bfloat12") == ElementPrecision(8, 3)
    assert resolve_precision("fp12") == ElementPrecision(5, 6)
    assert resolve_precision("e4m3") == ElementPrecision(4, 3)
    assert ElementPrecision.from_mx_specs(bfloat=16) == ElementPrecision(8, 7, rounding="nearest")
    assert ElementPrecision.from_mx_specs(fp=16, bfloat_subnorms=False).subnormals is False
    assert ElementPrecision.from_mx_specs() is None
    assert ElementPrecision(8, 7).max_normal == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert ElementPrecision(5, 10).min_subnormal == 2.0 ** -24


def test_dtype_inputs_and_identity():
    x = torch.randn(1000)
    assert torch.equal(round_to_precision(x, "fp32"), x)
    xb = x.to(torch.bfloat16)
    assert torch.equal(round_to_precision(xb, "bf16"), xb) and round_to_precision(xb, "e8m3").dtype == torch.bfloat16


@pytest.mark.parametrize("bad,match", [
    (dict(precision="e9m7"), "exponent_bits"),
    (dict(precision="e8m24"), "mantissa_bits"),
    (dict(precision="bfloat8"), "mantissa_bits"),
    (dict(precision="wat"), "unknown precision 'wat'"),
    (dict(precision=ElementPrecision(5, 10), dtype=torch.bfloat16), "e5m10 is not representable in torch.bfloat16"),
    (dict(precision="bf16", dtype=torch.int32), "torch.int32"),
    (dict(precision="bf16", dtype=torch.float64), "torch.float64"),
])
def test_bad_input_names_the_setting(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        x = torch.ones(3, dtype=bad.get("dtype", torch.float32))
        round_to_precision(x, bad["precision"])


def test_bad_options_name_the_setting():
    with pytest.raises(ValueError, match="rounding"):
        ElementPrecision(8, 7, rounding="up")
    with pytest.raises(ValueError, match="flush"):
        ElementPrecision(8, 7, flush="later")
    with pytest.raises(ValueError, match="bfloat"):
        ElementPrecision.from_mx_specs(bfloat=9)
    with pytest.raises(ValueError, match="only one"):
        ElementPrecision.from_mx_specs(bfloat=16, fp=16)
