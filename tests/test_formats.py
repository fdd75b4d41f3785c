"""Element formats: constants against ml_dtypes and the OCP MX v1.0 table, value grids, names, bad widths."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import groupquant as gq
from groupquant.formats import E8M0, FloatFormat, IntFormat, SpecialValues, get_format, get_scale_format, known_formats

# OCP MX v1.0 element formats (DESIGN.md table): bias, emax, max normal, min normal, min subnormal.
OCP_TABLE = {
    "fp8_e4m3": (7, 8, 448.0, 2.0 ** -6, 2.0 ** -9),
    "fp8_e5m2": (15, 15, 57344.0, 2.0 ** -14, 2.0 ** -16),
    "fp6_e3m2": (3, 4, 28.0, 2.0 ** -2, 2.0 ** -4),
    "fp6_e2m3": (1, 2, 7.5, 1.0, 2.0 ** -3),
    "fp4_e2m1": (1, 2, 6.0, 1.0, 2.0 ** -1),
}
OCP_SPECIALS = {  # (has NaN, has Inf)
    "fp8_e4m3": (True, False), "fp8_e5m2": (True, True), "fp6_e3m2": (False, False),
    "fp6_e2m3": (False, False), "fp4_e2m1": (False, False),
}
ML = {
    "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn, "fp6_e2m3": ml_dtypes.float6_e2m3fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
}
# Formats ml_dtypes has beyond the MX ones, with the groupquant format that should equal each.
OTHER = {
    "fnuz_e4m3": (FloatFormat(4, 3, SpecialValues.FNUZ), ml_dtypes.float8_e4m3fnuz),
    "fnuz_e5m2": (FloatFormat(5, 2, SpecialValues.FNUZ), ml_dtypes.float8_e5m2fnuz),
    "ieee_e4m3": (FloatFormat(4, 3, SpecialValues.IEEE), ml_dtypes.float8_e4m3),
    "ieee_e3m4": (FloatFormat(3, 4, SpecialValues.IEEE), ml_dtypes.float8_e3m4),
    "fnuz_e4m3_b11": (FloatFormat(4, 3, SpecialValues.FNUZ, bias=11), ml_dtypes.float8_e4m3b11fnuz),
}
ALL_ML = [(name, get_format(name), dt) for name, dt in ML.items()] + [(k, f, dt) for k, (f, dt) in OTHER.items()]


def decode_all(dtype: type) -> np.ndarray:
    """Every code of an ml_dtypes type decoded to float64."""
    bits = ml_dtypes.finfo(dtype).bits
    return np.arange(2 ** bits, dtype=np.uint8).view(dtype).astype(np.float64)


@pytest.mark.parametrize("name", list(OCP_TABLE))
def test_mx_float_constants_match_ocp_table(name):
    bias, emax, max_normal, min_normal, min_sub = OCP_TABLE[name]
    f = get_format(name)
    got = (f.bias, f.emax, f.max_normal, f.min_normal, f.min_subnormal)
    assert got == (bias, emax, max_normal, min_normal, min_sub)
    assert (f.has_nan, f.has_inf) == OCP_SPECIALS[name]


@pytest.mark.parametrize("name,fmt,dtype", ALL_ML, ids=[a[0] for a in ALL_ML])
def test_float_constants_match_ml_dtypes_finfo(name, fmt, dtype):
    fi = ml_dtypes.finfo(dtype)
    assert fmt.bit_width == fi.bits
    assert fmt.exponent_bit_width == fi.nexp and fmt.mantissa_bit_width == fi.nmant
    assert fmt.emin == fi.minexp
    assert fmt.bias == 1 - fi.minexp
    assert fmt.emax == fi.maxexp - 1
    assert fmt.max_normal == float(fi.max)
    assert fmt.min_normal == float(fi.smallest_normal)
    assert fmt.min_subnormal == float(fi.smallest_subnormal)


@pytest.mark.parametrize("name,fmt,dtype", ALL_ML, ids=[a[0] for a in ALL_ML])
def test_specials_and_values_match_ml_dtypes_decoding(name, fmt, dtype):
    vals = decode_all(dtype)
    assert fmt.has_nan == bool(np.isnan(vals).any())
    assert fmt.has_inf == bool(np.isinf(vals).any())
    finite = np.unique(vals[np.isfinite(vals)])  # -0 and +0 merge into one zero
    got = fmt.values()
    assert got.dtype == torch.float64
    np.testing.assert_array_equal(got.numpy(), finite)
    if fmt.nan_code is not None:
        assert np.isnan(vals[fmt.nan_code])


def test_mxint8_constants_match_ocp_table():
    f = get_format("int8")
    assert isinstance(f, IntFormat)
    assert (f.emax, f.max_normal, f.min_subnormal) == (0, 127 / 64, 2.0 ** -6)
    assert (f.qmin, f.qmax, f.frac_bits) == (-127, 127, 6)
    assert f.bias is None and f.min_normal is None and f.special_values is SpecialValues.NONE
    np.testing.assert_array_equal(f.values().numpy(), np.arange(-127, 128) / 64.0)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8, 12, 16])
@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("narrow", [True, False])
def test_int_formats_grid(bits, signed, narrow):
    f = IntFormat(bits, signed=signed, narrow_range=narrow)
    frac = bits - 2 if signed else bits - 1
    lo = (-(2 ** (bits - 1)) + int(narrow)) if signed else 0
    hi = 2 ** (bits - 1) - 1 if signed else 2 ** bits - 1
    assert (f.qmin, f.qmax, f.frac_bits) == (lo, hi, frac)
    np.testing.assert_array_equal(f.values().numpy(), np.arange(lo, hi + 1) * 2.0 ** -frac)
    assert f.max_normal == hi * 2.0 ** -frac == f.values().max().item()
    assert f.emax == math.floor(math.log2(f.max_normal))
    assert f.min_subnormal == 2.0 ** -frac


def test_ieee_and_nan_only_codes():
    assert get_format("fp8_e4m3").nan_code == 0x7F
    assert get_format("fp8_e5m2").nan_code in range(0x7D, 0x80)
    assert FloatFormat(4, 3, SpecialValues.FNUZ).nan_code == 0x80
    assert get_format("fp4_e2m1").nan_code is None


def _count_finite_codes(e: int, m: int, sv: SpecialValues, signed: bool) -> int:
    """Number of distinct finite values: codes minus NaN/Inf codes minus the duplicate zero."""
    per_sign = 2 ** (e + m)
    special = {SpecialValues.IEEE: 2 ** m, SpecialValues.NAN_ONLY: 1, SpecialValues.NONE: 0,
               SpecialValues.FNUZ: 0}[sv]
    if not signed:
        return per_sign - special
    if sv is SpecialValues.FNUZ:  # the negative-zero code is the one NaN
        return 2 * per_sign - 1
    return 2 * (per_sign - special) - 1


def _decode_generic(e: int, m: int, sv: SpecialValues, bias: int, signed: bool) -> np.ndarray:
    """Finite values of a minifloat by decoding every code with the textbook formula (float64)."""
    out = []
    for code in range(2 ** (e + m + int(signed))):
        sign = -1.0 if (signed and code >> (e + m)) else 1.0
        field_e, field_m = (code >> m) & (2 ** e - 1), code & (2 ** m - 1)
        mag_code = code & (2 ** (e + m) - 1)
        if sv is SpecialValues.IEEE and field_e == 2 ** e - 1:
            continue
        if sv is SpecialValues.NAN_ONLY and mag_code == 2 ** (e + m) - 1:
            continue
        if sv is SpecialValues.FNUZ and code == 2 ** (e + m):
            continue
        if field_e == 0:
            out.append(sign * field_m * 2.0 ** (1 - bias - m))
        else:
            out.append(sign * (2 ** m + field_m) * 2.0 ** (field_e - bias - m))
    return np.unique(np.array(out))


@settings(max_examples=60, deadline=None)
@given(e=st.integers(1, 7), m=st.integers(0, 7), signed=st.booleans(),
       sv=st.sampled_from([SpecialValues.IEEE, SpecialValues.NAN_ONLY, SpecialValues.FNUZ, SpecialValues.NONE,
                           SpecialValues.OCP]))
def test_generic_minifloat_grid(e, m, signed, sv):
    try:
        f = FloatFormat(e, m, sv, signed=signed)
    except ValueError:
        assume(False)
    v = f.values().numpy()
    assert np.all(np.diff(v) > 0)
    assert f.max_normal == v.max()
    assert f.min_subnormal == v[v > 0].min()
    assert f.min_normal == 2.0 ** f.emin
    assert f.emax == math.floor(math.log2(f.max_normal))
    assert len(v) == _count_finite_codes(e, m, f.special_values, signed)
    np.testing.assert_array_equal(v, _decode_generic(e, m, f.special_values, f.bias, signed))
    assert f.bit_width == e + m + int(signed)
    assert f.has_inf == (f.special_values is SpecialValues.IEEE)


@pytest.mark.parametrize("e,m,expected", [(4, 3, "nan_only"), (5, 2, "ieee"), (3, 2, "none"), (2, 3, "none"),
                                          (2, 1, "none"), (5, 10, "ieee"), (3, 4, "nan_only")])
def test_ocp_rule_for_special_values(e, m, expected):
    assert FloatFormat(e, m).special_values.value == expected


ALIASES = {
    "fp8_e4m3": ["mxfp8_e4m3", "mxfp8", "float_ocp_e4m3", " FP8_E4M3 "],
    "fp8_e5m2": ["mxfp8_e5m2", "float_ocp_e5m2"],
    "fp6_e3m2": ["mxfp6_e3m2"],
    "fp6_e2m3": ["mxfp6_e2m3", "mxfp6"],
    "fp4_e2m1": ["mxfp4_e2m1", "mxfp4"],
    "int8": ["mxint8", "INT8"],
}


@pytest.mark.parametrize("canonical", list(ALIASES))
def test_aliases_resolve_to_the_same_format(canonical):
    base = get_format(canonical)
    for alias in ALIASES[canonical]:
        f = get_format(alias)
        assert f == base, alias
        assert f.values().tolist() == base.values().tolist()


def test_every_known_name_resolves_and_mx_formats_listed():
    names = known_formats()
    assert names == sorted(names)
    for name in names:
        f = get_format(name)
        assert isinstance(f, (IntFormat, FloatFormat))
        assert len(f.values()) >= 3
    assert set(gq.MX_FORMATS) <= set(names)
    assert get_format("float_fnuz_e4m3") == FloatFormat(4, 3, SpecialValues.FNUZ)
    assert get_format("float_fnuz_e5m2") == FloatFormat(5, 2, SpecialValues.FNUZ)
    assert get_format("float_e4m3").special_values is SpecialValues.NONE
    assert get_format("float_e4m3").max_normal == 480.0
    assert get_format("mxint4") == IntFormat(4)
    fmt = FloatFormat(3, 3)
    assert get_format(fmt) is fmt


def test_unknown_name_lists_known_names():
    with pytest.raises(ValueError) as err:
        get_format("fp7_e9m9")
    msg = str(err.value)
    assert "fp7_e9m9" in msg and "fmt" in msg
    for name in ("fp8_e4m3", "fp4_e2m1", "int8"):
        assert name in msg


@pytest.mark.parametrize("bad", [None, 8, 4.5, torch.float32])
def test_non_string_format_is_type_error(bad):
    with pytest.raises(TypeError, match="fmt"):
        get_format(bad)


@pytest.mark.parametrize("kwargs,setting", [
    (dict(exponent_bit_width=0, mantissa_bit_width=3), "exponent_bit_width"),
    (dict(exponent_bit_width=4, mantissa_bit_width=-1), "mantissa_bit_width"),
    (dict(exponent_bit_width=4.0, mantissa_bit_width=3), "exponent_bit_width"),
    (dict(exponent_bit_width=4, mantissa_bit_width=2.5), "mantissa_bit_width"),
    (dict(exponent_bit_width=8, mantissa_bit_width=8), "bit width"),
    (dict(exponent_bit_width=8, mantissa_bit_width=7), "exponent"),  # bf16's range leaves float32's exact range
    (dict(exponent_bit_width=4, mantissa_bit_width=3, special_values="bogus"), "special_values"),
    (dict(exponent_bit_width=4, mantissa_bit_width=0, special_values="ieee"), "mantissa_bit_width"),
    (dict(exponent_bit_width=1, mantissa_bit_width=2, special_values="ieee"), "exponent_bit_width"),
    (dict(exponent_bit_width=4, mantissa_bit_width=3, special_values="fnuz", signed=False), "signed"),
    (dict(exponent_bit_width=1, mantissa_bit_width=0, special_values="nan_only"), "nan_only"),
    (dict(exponent_bit_width=4, mantissa_bit_width=3, bias=2.5), "bias"),
])
def test_invalid_float_settings_name_the_setting(kwargs, setting):
    with pytest.raises(ValueError, match=setting):
        FloatFormat(**kwargs)


@pytest.mark.parametrize("kwargs,setting", [
    (dict(bit_width=1), "bit_width"), (dict(bit_width=17), "bit_width"), (dict(bit_width=8.0), "bit_width"),
    (dict(bit_width=8, frac_bits=-1), "frac_bits"), (dict(bit_width=8, frac_bits=25), "frac_bits"),
])
def test_invalid_int_settings_name_the_setting(kwargs, setting):
    with pytest.raises(ValueError, match=setting):
        IntFormat(**kwargs)


def test_e8m0_constants_match_ml_dtypes():
    fi = ml_dtypes.finfo(ml_dtypes.float8_e8m0fnu)
    assert E8M0.min_exponent == fi.minexp == -127
    assert 2.0 ** E8M0.max_exponent == float(fi.max)
    assert E8M0.bias == 127
    vals = decode_all(ml_dtypes.float8_e8m0fnu)
    assert np.isnan(vals[E8M0.nan_code]) and np.isfinite(vals[:E8M0.nan_code]).all()


@pytest.mark.parametrize("name", list(OCP_TABLE) + ["int8"])
def test_describe_reports_the_constants(name):
    f = get_format(name)
    d = f.describe()
    assert d["name"] == f.name and d["max_normal"] == f.max_normal and d["emax"] == f.emax
    assert d["bit_width"] == f.bit_width


# ---- scale formats own their codec: the same bits as the element-format ops they replace -------

MINIFLOAT_SCALES = ["ue4m3", "ue5m3", "ue3m2", "ue5m2", "ue4m4", "ue2m1"]


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    return bool(torch.equal(nan_a, nan_b)) and bool(torch.equal(a[~nan_a].view(torch.int32), b[~nan_b].view(torch.int32)))


@pytest.mark.parametrize("name", MINIFLOAT_SCALES)
def test_minifloat_scale_decode_and_encode_are_the_element_codec(name):
    from groupquant.ops import decode, encode
    sf = get_scale_format(name)
    el = sf.element
    codes = torch.arange(256, dtype=torch.int32)
    inside = codes < (1 << el.bit_width)
    assert _same_bits(sf.decode(codes)[inside], decode(codes[inside], el))
    assert torch.isnan(sf.decode(codes)[~inside]).all()
    values = decode(codes[inside], el)
    normal = torch.isfinite(values) & (values >= el.min_normal)
    assert torch.equal(sf.encode(values[normal]), encode(values[normal], el).to(torch.uint8))
    assert sf.encode(torch.tensor([float("nan")])).item() == el.nan_code


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MINIFLOAT_SCALES), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=64))
def test_float_scale_block_scale_rounds_as_round_to_format(name, fractions):
    from groupquant.ops import round_to_format
    sf = get_scale_format(name)
    el = sf.element
    lo, hi = math.log2(el.min_normal), math.log2(el.max_normal)
    s = torch.tensor([2.0 ** (lo + f * (hi - lo)) for f in fractions], dtype=torch.float32).clamp(el.min_normal,
                                                                                                 el.max_normal)
    amax = s * 6.0  # fp4_e2m1's max normal: the block scale is round(amax / 6)
    scale, codes = sf.block_scale(amax, get_format("fp4_e2m1"), "float", torch.float32)
    assert torch.equal(scale, round_to_format((amax / 6.0).clamp(el.min_normal, el.max_normal), el, "even"))
    assert torch.equal(codes, sf.encode(scale))


def test_each_scale_kind_has_one_class_that_reads_its_records():
    # a record's kind finds its class in the registry (formats/scale.py); packing holds no kind list
    from groupquant.formats import ExponentScale, FloatScale, ScaleKind, scale_format_from_record
    from groupquant.formats.scale import SCALE_FORMAT_CLASSES

    owned = [kind for cls in SCALE_FORMAT_CLASSES for kind in cls.record_kinds]
    assert sorted(owned) == sorted(kind.name.lower() for kind in ScaleKind)  # each kind once
    for name in ("e8m0", "e3m0", "ue8m0", "ue4m3", "ue3m2", "float32", "bfloat16"):
        sf = get_scale_format(name)
        record = sf.record()
        assert record["kind"] in type(sf).record_kinds, name
        for back in (type(sf).from_record(record), scale_format_from_record(record)):
            assert back == sf and back.name == sf.name and type(back) is type(sf), name
    assert isinstance(scale_format_from_record({"kind": "exponent", "bits": 6}), ExponentScale)
    assert scale_format_from_record({"kind": "bfloat16"}) == FloatScale(ScaleKind.BFLOAT16)
    with pytest.raises(ValueError, match="'element'"):
        FloatScale.from_record({"kind": "minifloat", "name": "ue4m3"})
    with pytest.raises(ValueError, match="'kind' must be 'exponent', 'float32', 'bfloat16' or 'minifloat'"):
        scale_format_from_record({"kind": "float16"})
    with pytest.raises(TypeError, match="is a dict"):
        scale_format_from_record(["exponent", 8])
