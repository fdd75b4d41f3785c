"""saturating=False (non-saturating minifloats): rounding as if the exponent range had no top, then
+-Inf (formats with Inf) or NaN (NaN-only, FNUZ) beyond max normal.

Oracle: ml_dtypes' casts to its float8 types, which do not saturate (an out-of-range value becomes
Inf or NaN), applied to the value itself (no clamp). The native op must equal the reference bit for
bit, codes included.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import groupquant as gq
import mx_oracle
from ml_dtype_cases import FLOAT_CASES
from groupquant.formats import FloatFormat, IntFormat, SpecialValues
from groupquant.ops import make_spec, native, reference_fake_quant, reference_quantize, round_to_format
from groupquant.ops.kernel_params import op_params
from groupquant.ops.native_ops import native_fake_quant, native_fake_quant_with_scale, native_quantize

#: formats with Inf or NaN codes, and their ml_dtypes oracle
SPECIAL_CASES = [c for c in FLOAT_CASES if c[1].has_nan]
SPECIAL_IDS = [c[0] for c in SPECIAL_CASES]
NO_SPECIALS = ["fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "int8", IntFormat(4), FloatFormat(4, 3, SpecialValues.NONE)]


def test_the_oracle_cases_cover_inf_and_nan_only_formats():
    labels = set(SPECIAL_IDS)
    assert {"fp8_e4m3", "fp8_e5m2", "fnuz_e4m3", "fnuz_e5m2", "ieee_e4m3"} <= labels
    assert "fp4_e2m1" not in labels


def boundary_inputs(fmt: FloatFormat) -> np.ndarray:
    """Values around max normal: the grid points of the next binade, their midpoints (ties) and
    neighbours one float32 ulp away, both signs, plus +-Inf."""
    m = fmt.mantissa_bit_width
    top = fmt.max_normal
    step = math.ldexp(1.0, fmt.emax - m)  # grid step of the top binade
    pts = [top + k * step / 2 for k in range(-2, 6)] + [math.ldexp(1.0, fmt.emax + 1) * 1.5, 3.0e38]
    pts = np.array(pts, dtype=np.float32)
    near = np.concatenate([np.nextafter(pts, np.float32(0)), pts, np.nextafter(pts, np.float32(np.inf))])
    return np.concatenate([near, -near, np.array([np.inf, -np.inf], np.float32)])


def dense_inputs() -> np.ndarray:
    """Every finite bf16 value plus random float32 bit patterns of all magnitudes (finite)."""
    rng = np.random.default_rng(5)
    r = rng.integers(0, 0xFFFFFFFF, size=20000, dtype=np.uint32).view(np.float32)
    v = np.concatenate([mx_oracle.all_bf16(), r])
    return v[np.isfinite(v)]


DENSE = dense_inputs()


def assert_same_bits(got: torch.Tensor, want: np.ndarray, x: np.ndarray) -> None:
    """float32 bits equal (sign of zero and of Inf included); NaN where, and only where, want is NaN."""
    g = got.numpy()
    w = want.astype(np.float32)
    nan = np.isnan(w)
    np.testing.assert_array_equal(np.isnan(g), nan, err_msg=f"NaN positions differ, inputs {x[np.isnan(g) != nan][:5]}")
    bad = np.flatnonzero((g.view(np.uint32) != w.view(np.uint32)) & ~nan)
    assert bad.size == 0, f"{bad.size} mismatches, inputs {x[bad[:5]]}: got {g[bad[:5]]} want {w[bad[:5]]}"


@pytest.mark.parametrize("label,fmt,dtype", SPECIAL_CASES, ids=SPECIAL_IDS)
def test_round_to_format_matches_the_unclamped_ml_dtypes_cast(label, fmt, dtype):
    x = np.concatenate([DENSE, boundary_inputs(fmt)])
    want = x.astype(dtype).astype(np.float32)
    got = round_to_format(torch.from_numpy(x), fmt, "even", saturating=False)
    assert_same_bits(got, want, x)
    assert np.isnan(want).any() or np.isinf(want).any()  # the overflow rule is exercised


@pytest.mark.parametrize("label,fmt,dtype", SPECIAL_CASES, ids=SPECIAL_IDS)
def test_saturating_default_still_clamps(label, fmt, dtype):
    x = boundary_inputs(fmt)
    got = round_to_format(torch.from_numpy(x), fmt, "even")
    want = np.clip(x, -fmt.max_normal, fmt.max_normal).astype(dtype).astype(np.float32)
    assert_same_bits(got, want, x)


# (format, scaled value, even, nearest, floor): hand-built ties at the top of the range
HAND = [
    ("fp8_e4m3", 464.0, 448.0, math.nan, 448.0),  # tie between 448 and 480 (NaN code): even keeps 448
    ("fp8_e4m3", 470.0, math.nan, math.nan, 448.0),
    ("fp8_e4m3", -470.0, math.nan, math.nan, -448.0),
    ("fp8_e4m3", 448.0, 448.0, 448.0, 448.0),
    ("fp8_e5m2", 61440.0, math.inf, math.inf, 57344.0),  # tie between 57344 and 65536: even goes up, to Inf
    ("fp8_e5m2", 61439.99609375, 57344.0, 57344.0, 57344.0),
    ("fp8_e5m2", -61440.0, -math.inf, -math.inf, -57344.0),
    ("float_fnuz_e4m3", 248.0, math.nan, math.nan, 240.0),  # max 240: the tie rounds to 256, NaN
]


@pytest.mark.parametrize("fmt,x,even,nearest,floor", HAND)
def test_hand_built_ties_at_max_normal(fmt, x, even, nearest, floor):
    t = torch.tensor([x])
    for rounding, want in (("even", even), ("nearest", nearest), ("floor", floor)):
        got = round_to_format(t, gq.get_format(fmt), rounding, saturating=False).item()
        assert (math.isnan(got) and math.isnan(want)) or got == want, (fmt, x, rounding, got, want)


def test_fake_quant_hand_built_block():
    # one block, amax 470 -> floor scale 2**(8 - 8) = 1
    vals = [464.0, 470.0, -470.0, 448.0, -300.0] + [1.0] * 27
    x = torch.tensor([vals], requires_grad=True)
    y = gq.fake_quant(x, "fp8_e4m3", saturating=False, ste="clipped")
    assert y[0, 0].item() == 448.0 and y[0, 3].item() == 448.0 and y[0, 4].item() == -288.0
    assert torch.isnan(y[0, 1:3]).all()
    y.nansum().backward()  # the clipped mask keeps meaning |x / scale| <= max normal
    assert x.grad[0, :5].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
    e5 = gq.fake_quant(torch.tensor([[61440.0, 1.0]]), "fp8_e5m2", saturating=False)  # scale 2**(15 - 15)
    assert e5[0, 0].item() == math.inf
    q = gq.quantize(torch.tensor([vals]), "fp8_e4m3", saturating=False)
    assert q.codes[0, 0, :3].tolist() == [0x7E, 0x7F, 0x7F]  # 448, NaN, NaN (one NaN code)
    qe = gq.quantize(torch.tensor([[61440.0, -61440.0]]), "fp8_e5m2", saturating=False)
    assert qe.codes[0, 0].tolist() == [0x7C, 0xFC]  # +Inf, -Inf


@pytest.mark.parametrize("label,fmt,dtype", SPECIAL_CASES, ids=SPECIAL_IDS)
def test_fake_quant_and_codes_match_the_oracle_per_block(label, fmt, dtype):
    # blocks of 32 pinned at a power-of-two scale: fake_quant = cast(x / scale) * scale, codes = cast bits
    rng = np.random.default_rng(7)
    n = 400
    scale_exp = rng.integers(-20, 20, size=n)
    amax = np.ldexp(rng.uniform(1.0, 2.0, size=n), fmt.emax)  # every block's amax lies in the top binade
    el = rng.uniform(-1.0, 1.0, size=(n, 32)) * amax[:, None]
    el[:, 0] = amax
    el = el.astype(np.float32)
    x = (el.astype(np.float64) * np.ldexp(1.0, scale_exp)[:, None]).astype(np.float32)  # exact
    t = torch.from_numpy(x)
    want_el = el.astype(dtype)
    want = (want_el.astype(np.float64) * np.ldexp(1.0, scale_exp)[:, None]).astype(np.float32)
    assert_same_bits(gq.fake_quant(t, fmt, saturating=False), want, x)
    q = gq.quantize(t, fmt, saturating=False)
    codes = q.codes.reshape(n, 32).numpy()
    want_codes = want_el.view(np.uint8)
    nan = np.isnan(want_el.astype(np.float32))
    np.testing.assert_array_equal(codes[~nan], want_codes[~nan])
    assert (codes[nan] == fmt.nan_code).all()
    assert np.isnan(want).any() or np.isinf(want).any()


@pytest.mark.parametrize("fmt", NO_SPECIALS, ids=str)
@pytest.mark.parametrize("fn", [gq.fake_quant, gq.quantize, gq.ops.fake_quant_with_scale])
def test_formats_without_inf_or_nan_cannot_be_non_saturating(fn, fmt):
    with pytest.raises(ValueError, match="saturating"):
        fn(torch.randn(2, 32), fmt, saturating=False)
    with pytest.raises(ValueError, match="saturating"):
        round_to_format(torch.randn(4), gq.get_format(fmt), saturating=False)


@pytest.mark.parametrize("fn", [gq.fake_quant, gq.quantize, gq.ops.fake_quant_with_scale])
def test_saturating_must_be_a_bool(fn):
    with pytest.raises(TypeError, match="saturating"):
        fn(torch.randn(2, 32), "fp8_e4m3", saturating="no")


# ---- native == reference, bit for bit -----------------------------------------------------------

FORMATS = {"fp8_e4m3": gq.get_format("fp8_e4m3"), "fp8_e5m2": gq.get_format("fp8_e5m2"),
           "fnuz_e4m3": gq.get_format("float_fnuz_e4m3"), "e3m4_ieee": FloatFormat(3, 4, SpecialValues.IEEE),
           "ue5m3": FloatFormat(5, 3, signed=False), "e6m9": FloatFormat(6, 9)}


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = torch.where(torch.isnan(t), torch.full_like(t, float("nan")), t)
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


def _overflowing_input(shape, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Blocks whose amax sits anywhere in its binade (so elements overflow), a few specials and subnormals."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * torch.exp2(torch.randint(-10, 10, shape, generator=gen).float())
    flat = x.view(-1)
    flat[::97] = float("nan") if seed % 2 else float("inf")  # a few special blocks, most stay finite
    flat[5::23] = torch.finfo(dtype).tiny / 4
    top = flat[3::41]  # block maxima just below a power of two: they overflow even wide formats
    top.copy_(1.9995 * torch.exp2(torch.randint(-5, 5, top.shape, generator=gen).float()))
    return x.to(dtype)


@pytest.mark.skipif(not native.load(), reason="native kernels unavailable (no compiler)")
@pytest.mark.parametrize("name", list(FORMATS))
def test_native_equals_reference_bit_for_bit(name):
    fmt = FORMATS[name]
    overflowed = 0
    for i, (shape, dim, block) in enumerate([((6, 64), -1, 32), ((5, 45), 1, 7), ((3, 37, 5), 1, 8)]):
        for rounding in ("even", "nearest", "floor", "stochastic"):
            for scale_mode in ("floor", "even", "float"):
                for dtype in (torch.float32, torch.bfloat16, torch.float16):
                    x = _overflowing_input(shape, dtype, seed=i * 7 + len(rounding))
                    spec = make_spec(x, fmt, block, dim, rounding, scale_mode, seed=99, saturating=False)
                    what = f"{name} {shape} {rounding} {scale_mode} {dtype}"
                    ref, ref_mask = reference_fake_quant(x, spec, want_mask=True)
                    out, mask, _ = torch.ops.groupquant.group_fake_quant(
                        x, op_params(spec, x.dtype), True, False)
                    assert torch.equal(_bits(out), _bits(ref)), what
                    assert torch.equal(mask, ref_mask), what
                    assert torch.equal(_bits(native_fake_quant(x, spec)), _bits(ref)), what
                    assert torch.equal(_bits(native_fake_quant_with_scale(x, spec).value), _bits(ref)), what
                    q, rq = native_quantize(x, spec), reference_quantize(x, spec)
                    assert torch.equal(q.codes, rq.codes), what
                    assert torch.equal(_bits(q.dequantize()), _bits(ref)), what
                    saturated = reference_fake_quant(x, dataclasses.replace(spec, saturating=True))[0]
                    overflowed += int((~torch.isfinite(ref) & torch.isfinite(saturated)).sum())
    assert overflowed > 0  # the non-saturating rule was exercised


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU and a CUDA build of torch")
def test_cuda_op_matches_cpu_op_non_saturating():
    if not native.native_available(torch.device("cuda")):
        pytest.skip("the extension was built without CUDA")
    for name, fmt in FORMATS.items():
        for i, (shape, dim, block) in enumerate([((6, 64), -1, 32), ((5, 45), 1, 7), ((3, 37, 5), 1, 8)]):
            for rounding in ("even", "nearest", "stochastic"):
                for dtype in (torch.float32, torch.bfloat16):
                    x = _overflowing_input(shape, dtype, seed=i + len(rounding))
                    spec = make_spec(x, fmt, block, dim, rounding, "floor", seed=5, saturating=False)
                    what = f"{name} {shape} {rounding} {dtype}"
                    assert torch.equal(_bits(native_fake_quant(x.cuda(), spec).cpu()), _bits(native_fake_quant(x, spec))), what
                    qc, q = native_quantize(x.cuda(), spec), native_quantize(x, spec)
                    assert torch.equal(qc.codes.cpu(), q.codes), what
