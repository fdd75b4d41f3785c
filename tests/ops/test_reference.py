"""The reference against the independent numpy oracle: full bf16 and fp16 sweeps, fp32 inputs, every
power-of-two scale mode, other dims, padding, special blocks, codes and E8M0 scale codes, float scales."""
from __future__ import annotations


import math
import ml_dtypes
import numpy as np
import pytest
import torch

import groupquant as gq
import mx_oracle
from mx_oracle import MX

FORMATS = list(MX)
POW2_MODES = ["floor", "ceil", "even", "rceil"]
TORCH_TO_NP = {torch.bfloat16: ml_dtypes.bfloat16, torch.float16: np.float16, torch.float32: np.float32}
UINT_VIEW = {torch.bfloat16: (torch.int16, np.uint16), torch.float16: (torch.int16, np.uint16),
             torch.float32: (torch.int32, np.uint32)}


def bf16_sorted() -> np.ndarray:
    """All 65,536 bf16 patterns in code order, 2048 blocks of 32 (NaN/Inf patterns fill whole blocks)."""
    return mx_oracle.all_bf16().reshape(-1, 32)


def bf16_shuffled() -> np.ndarray:
    """Every finite bf16 value once, shuffled, 2032 blocks of 32: blocks mixing every magnitude."""
    v = mx_oracle.all_bf16()
    v = v[np.isfinite(v)]
    return np.random.default_rng(5).permutation(v).reshape(-1, 32)


def fp32_structured(n_blocks: int = 1500) -> np.ndarray:
    """float32 blocks with a random base exponent in [-150, 127] and 24-bit mantissas, spread over 2**-12 .. 1."""
    rng = np.random.default_rng(6)
    base = rng.integers(-150, 128, size=(n_blocks, 1))
    offs = rng.integers(-12, 1, size=(n_blocks, 32))
    mant = rng.integers(2 ** 23, 2 ** 24, size=(n_blocks, 32)) / 2.0 ** 23
    sign = rng.choice([-1.0, 1.0], size=(n_blocks, 32))
    v = sign * np.ldexp(mant, base + offs)
    with np.errstate(over="ignore"):
        v = v.astype(np.float32)
    v[~np.isfinite(v)] = np.float32(3.0e38)
    return v


def oracle_output(x: np.ndarray, fmt, mode: str, dtype: torch.dtype, rounding: str = "even") -> np.ndarray:
    """Oracle fake-quant of 2-D blocks, rounded once into the output dtype, as the dtype's unsigned bits.

    ``fmt`` is an MX format name or an :class:`mx_oracle.OracleFormat`.
    """
    of = MX[fmt] if isinstance(fmt, str) else fmt
    dtype_emax = math.frexp(torch.finfo(dtype).max)[1] - 1
    if rounding == "even":
        out = mx_oracle.quantize_blocks(x, of, mode, dtype_emax).output
    else:  # other element roundings: the float64 grid oracle with the same scale
        res = mx_oracle.quantize_blocks(x, of, mode, dtype_emax)
        scale = np.ldexp(1.0, res.exponent)[:, None]
        el = mx_oracle.round_grid(x / scale, of.grid, rounding, negative_zero=of.ml_dtype is not None)
        el[res.nan_block] = np.nan
        out = el * scale
    with np.errstate(over="ignore", invalid="ignore"):  # NaN blocks and values rounding past the dtype's max
        return out.astype(TORCH_TO_NP[dtype]).view(UINT_VIEW[dtype][1])


def assert_same_bits(got: torch.Tensor, want_bits: np.ndarray, what: str) -> None:
    """Bit-for-bit equality of a float tensor with the oracle's bits; NaN must meet NaN (any payload)."""
    ity, uty = UINT_VIEW[got.dtype]
    g = got.contiguous().view(ity).numpy().view(uty)
    got_nan = torch.isnan(got).numpy()
    want_nan = np.isnan(want_bits.view(TORCH_TO_NP[got.dtype]).astype(np.float32))
    where = np.argwhere(got_nan != want_nan)[:5].tolist()
    assert np.array_equal(got_nan, want_nan), f"{what}: NaN pattern differs at {where}"
    bad = np.argwhere((g != want_bits) & ~want_nan)
    assert bad.size == 0, f"{what}: {len(bad)} elements differ, first at {bad[:5].tolist()}"


def to_torch(x: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dtype)


@pytest.mark.parametrize("mode", POW2_MODES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("arrangement", ["sorted", "shuffled"])
def test_bf16_sweep_every_pattern(arrangement, fmt, mode):
    x = bf16_sorted() if arrangement == "sorted" else bf16_shuffled()
    xt = to_torch(x, torch.bfloat16)
    out = gq.fake_quant(xt, fmt, 32, scale_mode=mode)
    assert out.dtype == torch.bfloat16 and out.shape == xt.shape
    assert_same_bits(out, oracle_output(x, fmt, mode, torch.bfloat16), f"{arrangement} {fmt} {mode}")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("arrangement", ["sorted", "shuffled"])
def test_bf16_sweep_codes_and_scale_codes(arrangement, fmt):
    x = bf16_sorted() if arrangement == "sorted" else bf16_shuffled()
    xt = to_torch(x, torch.bfloat16)
    q = gq.quantize(xt, fmt, 32)
    res = mx_oracle.quantize_blocks(x, MX[fmt], "floor")
    f = gq.get_format(fmt)
    assert q.codes.shape == (x.shape[0], 1, 32) and q.scale_codes.shape == (x.shape[0], 1, 1)
    assert q.codes.dtype == (torch.int8 if fmt == "int8" else torch.uint8)
    codes = q.codes.reshape(x.shape).to(torch.int64).numpy()
    ok = ~res.nan_block
    np.testing.assert_array_equal(codes[ok], mx_oracle.element_codes(res.elements[ok], MX[fmt]))
    # a NaN block: every element written as the format's NaN code (0 where the format has none)
    assert (codes[res.nan_block] == (getattr(f, "nan_code", None) or 0)).all()
    want_sc = np.where(res.nan_block, 0xFF, res.exponent + 127)
    np.testing.assert_array_equal(q.scale_codes.reshape(-1).numpy(), want_sc)
    np.testing.assert_array_equal(q.scale.reshape(-1).numpy()[ok], np.ldexp(1.0, res.exponent[ok]).astype(np.float32))
    assert torch.isnan(q.scale.reshape(-1)[torch.from_numpy(res.nan_block)]).all()
    deq = q.dequantize()
    fq = gq.fake_quant(xt, fmt, 32)
    assert torch.equal(deq.view(torch.int16)[~torch.isnan(fq)], fq.view(torch.int16)[~torch.isnan(fq)])
    assert torch.equal(torch.isnan(deq), torch.isnan(fq))


@pytest.mark.parametrize("rounding", ["nearest", "floor"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_bf16_sweep_other_roundings(fmt, rounding):
    x = bf16_shuffled()
    out = gq.fake_quant(to_torch(x, torch.bfloat16), fmt, 32, rounding=rounding)
    assert_same_bits(out, oracle_output(x, fmt, "floor", torch.bfloat16, rounding), f"{fmt} {rounding}")


OTHER_FORMATS = [
    (gq.FloatFormat(4, 3, gq.SpecialValues.FNUZ), ml_dtypes.float8_e4m3fnuz),
    (gq.FloatFormat(5, 2, gq.SpecialValues.FNUZ), ml_dtypes.float8_e5m2fnuz),
    (gq.FloatFormat(4, 3, gq.SpecialValues.IEEE), ml_dtypes.float8_e4m3),
    (gq.FloatFormat(3, 4, gq.SpecialValues.IEEE), ml_dtypes.float8_e3m4),
]


@pytest.mark.parametrize("mode", ["floor", "rceil"])
@pytest.mark.parametrize("fmt,dtype", OTHER_FORMATS, ids=[d.__name__ for _, d in OTHER_FORMATS])
def test_bf16_sweep_non_mx_formats_given_as_objects(fmt, dtype, mode):
    x = bf16_shuffled()
    out = gq.fake_quant(to_torch(x, torch.bfloat16), fmt, 32, scale_mode=mode)
    of = mx_oracle.from_ml_dtype(dtype.__name__, dtype)
    assert (of.emax, of.max_normal) == (fmt.emax, fmt.max_normal)
    assert_same_bits(out, oracle_output(x, of, mode, torch.bfloat16), f"{dtype.__name__} {mode}")
    q = gq.quantize(to_torch(x, torch.bfloat16), fmt, 32, scale_mode=mode)
    res = mx_oracle.quantize_blocks(x, of, mode)
    np.testing.assert_array_equal(q.codes.reshape(x.shape).numpy(), mx_oracle.element_codes(res.elements, of))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("k", [-100, -7, 0, 5, 90])
def test_every_representable_value_maps_to_itself(fmt, k):
    """The whole value grid in one block (amax = max normal, so the scale is 2**k exactly) is a fixed point."""
    grid = MX[fmt].grid
    vals = np.concatenate([-grid[:0:-1], grid]) * 2.0 ** k
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.from_numpy(vals.astype(np.float32)).to(dtype)
        assert torch.equal(gq.fake_quant(x, fmt, None), x)
        q = gq.quantize(x, fmt, None)
        assert q.scale_codes.item() == 127 + k
        np.testing.assert_array_equal(q.codes.reshape(-1).to(torch.int64).numpy(),
                                      mx_oracle.element_codes(vals * 2.0 ** -k, MX[fmt]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_fp16_sweep_every_pattern(fmt):
    x = mx_oracle.all_fp16().reshape(-1, 32)
    out = gq.fake_quant(to_torch(x, torch.float16), fmt, 32)
    assert out.dtype == torch.float16
    assert_same_bits(out, oracle_output(x, fmt, "floor", torch.float16), fmt)


@pytest.mark.parametrize("mode", POW2_MODES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_fp32_structured_blocks(fmt, mode):
    x = fp32_structured()
    out = gq.fake_quant(torch.from_numpy(x), fmt, 32, scale_mode=mode)
    assert out.dtype == torch.float32
    assert_same_bits(out, oracle_output(x, fmt, mode, torch.float32), f"{fmt} {mode}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_fp32_random_bit_patterns(fmt):
    bits = np.random.default_rng(7).integers(0, 2 ** 32, size=(512, 32), dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    out = gq.fake_quant(torch.from_numpy(x.copy()), fmt, 32)
    assert_same_bits(out, oracle_output(x, fmt, "floor", torch.float32), fmt)


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp4_e2m1", "int8"])
def test_dim_other_than_last(fmt):
    x = bf16_shuffled()[:1024]  # 1024 blocks of 32
    ref = gq.fake_quant(to_torch(x, torch.bfloat16), fmt, 32)
    xt = to_torch(x.T, torch.bfloat16)  # [32, 1024]: the groups run down dim 0
    out = gq.fake_quant(xt, fmt, 32, dim=0)
    assert torch.equal(out.T.contiguous().view(torch.int16), ref.view(torch.int16))
    x3 = x.reshape(4, 256, 32).transpose(0, 2, 1)  # [4, 32, 256]: groups along dim 1
    out3 = gq.fake_quant(to_torch(x3, torch.bfloat16), fmt, 32, dim=1)
    back = out3.permute(0, 2, 1).reshape(1024, 32)
    assert torch.equal(back.contiguous().view(torch.int16), ref.view(torch.int16))
    q = gq.quantize(to_torch(x3, torch.bfloat16), fmt, 32, dim=-2)
    assert q.codes.shape == (4, 1, 32, 256) and q.scale.shape == (4, 1, 1, 256)
    assert torch.equal(q.dequantize().view(torch.int16), out3.view(torch.int16))


@pytest.mark.parametrize("fmt", ["fp8_e5m2", "fp6_e3m2", "int8"])
@pytest.mark.parametrize("dim", [0, 1])
def test_padding_matches_explicitly_zero_padded_blocks(fmt, dim):
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((40, 70)) * np.exp2(rng.integers(-20, 20, size=(40, 1)))).astype(np.float32)
    x = x if dim == 1 else np.ascontiguousarray(x.T)
    out = gq.fake_quant(torch.from_numpy(x), fmt, 32, dim=dim)
    rows = x if dim == 1 else x.T
    padded = np.concatenate([rows, np.zeros((rows.shape[0], 26), np.float32)], axis=1)  # 70 -> 96
    want = mx_oracle.quantize_blocks(padded.reshape(-1, 32), MX[fmt]).output.reshape(rows.shape[0], 96)[:, :70]
    want = want if dim == 1 else want.T
    np.testing.assert_array_equal(out.numpy().view(np.uint32), want.astype(np.float32).view(np.uint32))
    q = gq.quantize(torch.from_numpy(x), fmt, 32, dim=dim)
    assert q.codes.shape[dim:dim + 2] == (3, 32)
    assert torch.equal(q.dequantize(), out)


F32_MAX = float(np.finfo(np.float32).max)
SPECIAL_BLOCKS = {
    "zeros": [0.0] * 32,
    "signed_zeros": [-0.0, 0.0] * 16,
    "nan": [1.0, float("nan")] + [0.5] * 30,
    "inf": [float("inf")] + [1.0] * 31,
    "neg_inf": [-2.0, -float("inf")] + [0.0] * 30,
    "min_subnormal": [2.0 ** -149] + [0.0] * 31,
    "near_2^-127": [2.0 ** -127, -1.5 * 2.0 ** -127, 2.0 ** -130, 2.0 ** -136] + [2.0 ** -140] * 28,
    "min_normal": [2.0 ** -126, 1.75 * 2.0 ** -126, -(2.0 ** -126) * 1.0625] + [2.0 ** -133] * 29,
    "near_2^-120": [1.9 * 2.0 ** -120, 2.0 ** -125, 2.0 ** -129] + [0.0] * 29,
    "f32_max": [F32_MAX, -F32_MAX, 1.0, 2.0 ** 100] + [2.0 ** 120] * 28,
    "below_f32_max": [float(np.nextafter(np.float32(F32_MAX), np.float32(0)))] + [2.0 ** 126] * 31,
    "two^127": [2.0 ** 127, -(2.0 ** 126) * 1.75] + [2.0 ** 118] * 30,
    "below_pow2": [float(np.nextafter(np.float32(2.0 ** k), np.float32(0))) for k in range(-16, 16)],
    "pow2": [2.0 ** k for k in range(-16, 16)],
}


@pytest.mark.parametrize("mode", POW2_MODES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_special_blocks(fmt, mode):
    x = np.array(list(SPECIAL_BLOCKS.values()), dtype=np.float32)
    out = gq.fake_quant(torch.from_numpy(x), fmt, 32, scale_mode=mode)
    assert_same_bits(out, oracle_output(x, fmt, mode, torch.float32), f"{fmt} {mode}")
    q = gq.quantize(torch.from_numpy(x), fmt, 32, scale_mode=mode)
    names = list(SPECIAL_BLOCKS)
    sc = q.scale_codes.reshape(-1).tolist()
    for name in ("nan", "inf", "neg_inf"):
        assert sc[names.index(name)] == 0xFF
        assert torch.isnan(out[names.index(name)]).all()
    assert sc[names.index("zeros")] == 0 and sc[names.index("min_subnormal")] == 0
    assert torch.equal(q.dequantize().nan_to_num(), out.nan_to_num())


@pytest.mark.parametrize("fmt", FORMATS)
def test_block_max_just_below_every_power_of_two(fmt):
    """Block k holds nextafter(2**k, 0) (k = -126 .. 127) and smaller values: its scale is 2**(k - 1 - emax)."""
    ks = np.arange(-126, 128)
    top = np.nextafter(np.ldexp(np.float32(1.0), ks).astype(np.float32), np.float32(0))
    x = top[:, None] * np.linspace(1.0, -0.3, 32, dtype=np.float32)[None, :]
    x[:, 0] = top
    out = gq.fake_quant(torch.from_numpy(x), fmt, 32)
    assert_same_bits(out, oracle_output(x, fmt, "floor", torch.float32), fmt)
    q = gq.quantize(torch.from_numpy(x), fmt, 32)
    want = np.clip(ks - 1 - MX[fmt].emax, -127, 127) + 127
    np.testing.assert_array_equal(q.scale_codes.reshape(-1).numpy(), want)


def test_special_blocks_hand_checked_values():
    """A few outcomes worked out by hand (OCP floor rule), independent of the oracle."""
    x = torch.tensor([SPECIAL_BLOCKS["f32_max"], SPECIAL_BLOCKS["near_2^-127"], SPECIAL_BLOCKS["zeros"]])
    out = gq.fake_quant(x, "fp8_e4m3", 32)
    # floor(log2 f32max) = 127 -> scale 2**119; f32max / 2**119 = 511.99.. saturates to 448; 1.0 underflows to 0
    assert out[0, 0].item() == 448 * 2.0 ** 119 and out[0, 1].item() == -448 * 2.0 ** 119
    assert out[0, 2].item() == 0.0 and out[0, 3].item() == 0.0 and out[0, 4].item() == 2.0 ** 120
    # amax 2**-127 -> exponent -135 clamps to -127; elements x / 2**-127: 1, -1.5, 2**-3, 2**-9, 2**-13 -> 0
    assert out[1, :5].tolist() == [2.0 ** -127, -1.5 * 2.0 ** -127, 2.0 ** -130, 2.0 ** -136, 0.0]
    assert torch.equal(out[2], torch.zeros(32))
    q = gq.quantize(x, "fp8_e4m3", 32)
    assert q.scale_codes.reshape(-1).tolist() == [119 + 127, 0, 0]


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp4_e2m1", "int8"])
def test_all_zero_input_and_nan_everywhere(fmt):
    z = torch.zeros(3, 64)
    assert torch.equal(gq.fake_quant(z, fmt), z)
    q = gq.quantize(z, fmt)
    assert (q.scale_codes == 0).all() and (q.codes == 0).all()
    n = torch.full((2, 32), float("nan"))
    assert torch.isnan(gq.fake_quant(n, fmt)).all()


def test_float_scale_mode_int4_group_128():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((16, 512)) * np.exp2(rng.integers(-10, 10, size=(16, 1)))).astype(np.float32)
    xt = torch.from_numpy(x)
    q = gq.quantize(xt, "int4", 128, scale_mode="float")
    assert q.scale_codes is None
    assert q.codes.dtype == torch.int8 and q.codes.shape == (16, 4, 128)
    codes = q.codes.to(torch.int64).numpy()
    assert codes.min() >= -7 and codes.max() <= 7
    blocks = x.reshape(16, 4, 128).astype(np.float64)
    amax = np.abs(blocks).max(axis=2, keepdims=True)
    assert (np.abs(codes).max(axis=2) == 7).all()  # each group's largest element takes the extreme code
    step = amax / 7  # the int4 step of each group: amax / max_int
    np.testing.assert_allclose(q.scale.numpy(), amax / 1.75, rtol=2 ** -23)  # element 1.75 == code 7
    ideal = blocks / step
    near_tie = np.abs(np.abs(ideal - np.floor(ideal)) - 0.5) < 1e-4
    want = np.clip(np.round(ideal), -7, 7)
    assert (codes[~near_tie] == want[~near_tie]).all()
    deq = q.dequantize().numpy().reshape(16, 4, 128)
    np.testing.assert_allclose(deq, codes * step, rtol=1e-6, atol=0)
    assert np.all(np.abs(deq - blocks) <= step / 2 * (1 + 1e-5))
    assert torch.equal(q.dequantize(), gq.fake_quant(xt, "int4", 128, scale_mode="float"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_float_scale_mode_elements_on_grid_and_error_bounded(fmt):
    x = fp32_structured(300)
    x = x[np.abs(x).max(axis=1) > 2.0 ** -100]  # keep scales normal (amax / max_normal stays exact-ish)
    q = gq.quantize(torch.from_numpy(x), fmt, 32, scale_mode="float")
    el = q.element_values().reshape(x.shape).numpy().astype(np.float64)
    grid = MX[fmt].grid
    assert np.isin(np.abs(el), grid).all()
    scale = q.scale.reshape(-1, 1).numpy().astype(np.float64)
    np.testing.assert_array_equal(scale, (np.abs(x).max(axis=1, keepdims=True) / np.float32(MX[fmt].max_normal)))
    scaled = x / scale
    lo, hi = mx_oracle.neighbours(scaled, grid)
    half_step = np.where(hi > lo, (hi - lo) / 2, grid[-1] * 2.0 ** -22)  # amax / scale may exceed max by an ulp
    err = np.abs(np.abs(scaled) - np.abs(el))
    assert np.all(err <= half_step * (1 + 1e-6)), np.max(err / half_step)
