"""Element codes: encode/decode against ml_dtypes bit patterns for every code of the 8/6/4-bit formats."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from groupquant.formats import FloatFormat, IntFormat, SpecialValues, get_format
from groupquant.ops import code_dtype, decode, encode
from ml_dtype_cases import FLOAT_CASES

CASES = FLOAT_CASES + [
    ("fnuz_e4m3_b11", FloatFormat(4, 3, SpecialValues.FNUZ, bias=11), ml_dtypes.float8_e4m3b11fnuz),
]
IDS = [c[0] for c in CASES]
WITH_INF = [c for c in CASES if c[1].has_inf]
WITH_NAN = [c for c in CASES if c[1].has_nan]


def all_codes(fmt) -> np.ndarray:
    return np.arange(2 ** fmt.bit_width, dtype=np.uint8)


def ml_decode(codes: np.ndarray, dtype) -> np.ndarray:
    return codes.view(dtype).astype(np.float32)


@pytest.mark.parametrize("name,fmt,dtype", CASES, ids=IDS)
def test_decode_every_code_matches_ml_dtypes(name, fmt, dtype):
    codes = all_codes(fmt)
    want = ml_decode(codes, dtype)
    got = decode(torch.from_numpy(codes), fmt).numpy()
    assert got.dtype == np.float32
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    # bit-for-bit: also the sign of zero and of Inf
    np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


@pytest.mark.parametrize("name,fmt,dtype", CASES, ids=IDS)
def test_encode_every_finite_value_gives_its_ml_dtypes_code(name, fmt, dtype):
    codes = all_codes(fmt)
    vals = ml_decode(codes, dtype)
    finite = np.isfinite(vals)
    got = encode(torch.from_numpy(vals[finite]), fmt)
    assert got.dtype == torch.uint8 == code_dtype(fmt)
    np.testing.assert_array_equal(got.numpy(), codes[finite])


@pytest.mark.parametrize("name,fmt,dtype", CASES, ids=IDS)
def test_encode_of_the_values_grid_round_trips(name, fmt, dtype):
    v = fmt.values().float()
    c = encode(v, fmt)
    np.testing.assert_array_equal(ml_decode(c.numpy(), dtype), v.numpy())
    assert torch.equal(decode(c, fmt), v)


@pytest.mark.parametrize("name,fmt,dtype", WITH_INF, ids=[c[0] for c in WITH_INF])
def test_encode_infinities_in_ieee_formats(name, fmt, dtype):
    inf = np.array([np.inf, -np.inf], dtype=np.float32)
    got = encode(torch.from_numpy(inf), fmt).numpy()
    np.testing.assert_array_equal(got, inf.astype(dtype).view(np.uint8))


@pytest.mark.parametrize("name,fmt,dtype", WITH_NAN, ids=[c[0] for c in WITH_NAN])
def test_nan_encodes_to_the_format_nan_code(name, fmt, dtype):
    nan = torch.tensor([float("nan"), -float("nan")])
    got = encode(nan, fmt)
    assert got.tolist() == [fmt.nan_code, fmt.nan_code]
    assert np.isnan(ml_decode(got.numpy(), dtype)).all()
    assert torch.isnan(decode(got, fmt)).all()


@pytest.mark.parametrize("name,fmt,dtype", CASES, ids=IDS)
def test_negative_zero(name, fmt, dtype):
    code = encode(torch.tensor([-0.0]), fmt).item()
    want = np.array([-0.0], dtype=np.float32).astype(dtype).view(np.uint8).item()
    assert code == want
    if fmt.special_values is SpecialValues.FNUZ:
        assert code == 0  # FNUZ has no -0: its code is the NaN
    else:
        assert code == 1 << (fmt.bit_width - 1)
        assert torch.signbit(decode(torch.tensor([code], dtype=torch.uint8), fmt)).item()


@pytest.mark.parametrize("name,fmt,dtype", [c for c in CASES if c[1].special_values is SpecialValues.FNUZ],
                         ids=[c[0] for c in CASES if c[1].special_values is SpecialValues.FNUZ])
def test_fnuz_nan_is_the_negative_zero_code(name, fmt, dtype):
    assert fmt.nan_code == 0x80
    assert torch.isnan(decode(torch.tensor([0x80], dtype=torch.uint8), fmt)).item()
    assert np.isnan(ml_decode(np.array([0x80], dtype=np.uint8), dtype)).item()


def test_decode_accepts_signed_code_tensors():
    fmt = get_format("fp8_e4m3")
    codes = np.arange(256, dtype=np.uint8)
    as_u8 = decode(torch.from_numpy(codes), fmt)
    as_i8 = decode(torch.from_numpy(codes.view(np.int8)), fmt)
    as_i32 = decode(torch.from_numpy(codes.astype(np.int32)), fmt)
    assert torch.equal(as_u8.nan_to_num(), as_i8.nan_to_num())
    assert torch.equal(as_u8.nan_to_num(), as_i32.nan_to_num())


@pytest.mark.parametrize("fmt", [IntFormat(8), IntFormat(4), IntFormat(2), IntFormat(16), IntFormat(8, signed=False),
                                 IntFormat(12, signed=False), IntFormat(8, frac_bits=0)], ids=str)
def test_int_codes_are_the_integers(fmt):
    ints = np.arange(fmt.qmin, fmt.qmax + 1)
    vals = torch.from_numpy(ints * 2.0 ** -fmt.frac_bits).float()
    codes = encode(vals, fmt)
    assert codes.dtype == code_dtype(fmt)
    np.testing.assert_array_equal(codes.numpy().astype(np.int64), ints)
    assert torch.equal(decode(codes, fmt), vals)


def test_int_code_dtypes():
    assert code_dtype(IntFormat(8)) == torch.int8
    assert code_dtype(IntFormat(4)) == torch.int8
    assert code_dtype(IntFormat(16)) == torch.int16
    assert code_dtype(IntFormat(8, signed=False)) == torch.uint8
    assert code_dtype(IntFormat(9, signed=False)) == torch.int32
    assert code_dtype(FloatFormat(5, 10)) == torch.int32


@pytest.mark.parametrize("fmt", [FloatFormat(5, 10), FloatFormat(4, 7), FloatFormat(3, 3, signed=False),
                                 FloatFormat(4, 4, SpecialValues.NONE), FloatFormat(2, 0)], ids=str)
def test_generic_float_codes_round_trip(fmt):
    """Formats ml_dtypes lacks: decode every code, then encode the finite ones back."""
    codes = torch.arange(2 ** fmt.bit_width, dtype=torch.int32).to(code_dtype(fmt))
    vals = decode(codes, fmt)
    finite = torch.isfinite(vals)
    back = encode(vals[finite], fmt)
    assert torch.equal(back.to(torch.int64), codes[finite].to(torch.int64))
    uniq = torch.unique(vals[finite].double())
    assert torch.equal(uniq, fmt.values())


def test_float16_like_format_matches_torch_half():
    fmt = FloatFormat(5, 10)  # IEEE binary16 by the OCP rule (>= 8 bits, 5 exponent bits)
    codes = torch.arange(2 ** 16, dtype=torch.int32)
    want = codes.to(torch.int16).view(torch.float16).float()
    got = decode(codes, fmt)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    ok = ~torch.isnan(want)
    assert torch.equal(got[ok].view(torch.int32), want[ok].view(torch.int32))
