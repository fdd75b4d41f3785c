"""Scale formats other than E8M0 against the independent oracle (nvfp4_oracle.block_quantize):
E{k}M0 (floor rule, clamped and saturating), bfloat16 and float32 scales, unsigned minifloats
(UE4M3 via ml_dtypes' float8_e4m3fn, others from the textbook grid) with and without a tensor
scale; the reference and the native op bit for bit; argument errors naming the setting."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import groupquant as gq
import nvfp4_oracle as oracle
from groupquant.formats import get_scale_format
from groupquant.ops import make_spec, native, reference_fake_quant, reference_quantize
from groupquant.ops.native_ops import native_fake_quant, native_quantize
from nvfp4_oracle import adversarial, assert_bits, to_torch

NATIVE = native.load()
NP = {torch.float32: np.float32, torch.bfloat16: ml_dtypes.bfloat16, torch.float16: np.float16}
#: groupquant scale format name -> oracle description
SCALES = {"e8m0": ("exp", 8), "e5m0": ("exp", 5), "e3m0": ("exp", 3), "bf16": ("bf16",), "float32": ("f32",),
          "ue4m3": ("ue4m3",), "ue5m3": ("mini", 5, 3), "ue3m2": ("mini", 3, 2), "ue5m2": ("mini", 5, 2)}
MINIFLOATS = [k for k, v in SCALES.items() if v[0] in ("ue4m3", "mini")]
ELEMENTS = ["fp4_e2m1", "fp8_e4m3", "int8"]


def check(x_np: np.ndarray, fmt: str, scale: str, block: int = 32, dim: int = -1, tensor_scale: bool = False,
          what: str = "") -> oracle.OracleResult:
    """Reference, native and public API against the oracle: values, codes, scales, scale codes, tensor scale."""
    want = oracle.block_quantize(x_np, SCALES[scale], oracle.ELEMENTS[fmt], block, dim, tensor_scale)
    x = to_torch(x_np)
    what = f"{what} {fmt} scale_format={scale} block={block} dim={dim} ts={tensor_scale} {x.dtype} {tuple(x.shape)}"
    kw = dict(scale_format=scale, tensor_scale=tensor_scale)
    assert_bits(gq.fake_quant(x, fmt, block, dim, **kw), want.output, f"public {what}")
    spec = make_spec(x, fmt, block, dim, **kw)
    runs = [("reference", reference_fake_quant(x, spec)[0], reference_quantize(x, spec))]
    if NATIVE:
        runs.append(("native", native_fake_quant(x, spec), native_quantize(x, spec)))
    for name, value, q in runs:
        w = f"{name} {what}"
        assert_bits(value, want.output, f"values {w}")
        assert np.array_equal(q.codes.numpy().astype(np.int64), want.codes), f"codes {w}"
        assert_bits(q.scale, want.scale, f"scales {w}")
        if want.scale_codes is None:
            assert q.scale_codes is None, w
        else:
            assert np.array_equal(q.scale_codes.numpy().astype(np.int64), want.scale_codes), f"scale codes {w}"
        if tensor_scale:
            assert_bits(q.tensor_scale, np.asarray(want.tensor_scale, dtype=np.float32), f"tensor scale {w}")
        else:
            assert q.tensor_scale is None
        assert_bits(q.dequantize(), want.output, f"dequantize {w}")
    return want


def wide(shape, seed: int, lo: int = -60, hi: int = 60) -> np.ndarray:
    """Blocks of 32 with a per-block binade in [lo, hi) (so E{k}M0 clamps at both ends), adversarial inside."""
    x = adversarial(shape, seed).astype(np.float64)
    rows = np.random.default_rng(seed).integers(lo, hi, shape[:-1] + (1,))
    return (x * 2.0 ** -30 * np.exp2(rows)).astype(np.float32)


@pytest.mark.parametrize("fmt", ELEMENTS)
@pytest.mark.parametrize("scale", list(SCALES))
def test_scale_formats_against_oracle(scale, fmt):
    x = wide((24, 70), seed=len(scale) * 7 + len(fmt))
    x[0, :5] = 0.0
    x[1] = 0.0  # a zero row (its blocks: all zero)
    x[2, 40] = np.nan
    x[3, 3] = np.inf
    check(x, fmt, scale, 32, -1, what="wide")
    check(x[4:].T.copy(), fmt, scale, 16, 0, what="dim 0")
    check(x[4:].reshape(4, 5, 70)[:, :, :9].copy(), fmt, scale, 4, 1, what="middle dim")


@pytest.mark.parametrize("scale", MINIFLOATS)
@pytest.mark.parametrize("fmt", ["fp4_e2m1", "fp8_e4m3"])
def test_minifloat_scales_with_a_tensor_scale(scale, fmt):
    x = wide((12, 48), seed=3, lo=-40, hi=40)
    check(x, fmt, scale, 16, -1, True, "two-level")
    check(np.zeros((2, 20), np.float32), fmt, scale, 16, -1, True, "all zero")
    check(x * np.float32(2.0 ** -100), fmt, scale, 16, -1, True, "tiny")
    y = x.copy()
    y[5, 5] = np.nan
    want = check(y, fmt, scale, 16, -1, True, "NaN")
    assert np.all(np.isnan(want.output))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("scale", ["e5m0", "bf16", "ue4m3", "ue5m3"])
def test_half_inputs(scale, dtype):
    x = wide((8, 64), seed=9, lo=-20, hi=20)
    if dtype == torch.float16:
        x = np.clip(x * np.float32(2.0 ** -10), -60000, 60000)
    check(x.astype(NP[dtype]), "fp4_e2m1", scale, 32, -1, what="half")
    if scale.startswith("ue"):
        check(x.astype(NP[dtype]), "fp4_e2m1", scale, 16, -1, True, "half two-level")


def test_e_k_m0_clamps_and_saturates():
    # e5m0: exponents in [-15, 15]. amax 2**30 (fp4: floor exponent 28) saturates at 2**15 instead
    # of microxcaling's NaN; amax 2**-40 is clamped to 2**-15 and its elements round to 0
    x = np.zeros((3, 32), np.float32)
    x[0, :3] = [2.0 ** 30, -(2.0 ** 29), 1.0]
    x[1, :2] = [2.0 ** -40, 2.0 ** -41]
    x[2, :2] = [4.0, 3.0]
    want = check(x, "fp4_e2m1", "e5m0", what="e5m0 clamps")
    assert want.scale[:, 0, 0].tolist() == [2.0 ** 15, 2.0 ** -15, 1.0]
    assert want.scale_codes[:, 0, 0].tolist() == [30, 0, 15]
    assert want.output[0, :2].tolist() == [6 * 2.0 ** 15, -6 * 2.0 ** 15] and np.all(want.output[1] == 0)
    q = gq.quantize(torch.from_numpy(x), "fp4_e2m1", scale_format="e5m0")
    assert torch.equal(q.scale_codes[:, 0, 0], torch.tensor([30, 0, 15], dtype=torch.uint8))
    nan = gq.quantize(torch.tensor([[float("nan")] + [1.0] * 31]), "fp4_e2m1", scale_format="e5m0")
    assert nan.scale_codes.item() == 31


def test_ue4m3_scale_codes_are_e4m3fn_bytes_and_float_scales_have_none():
    x = torch.from_numpy(wide((6, 64), seed=4, lo=-20, hi=20))
    q = gq.quantize(x, "fp8_e4m3", 32, scale_format="ue4m3")
    e4 = q.scale.numpy().astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert np.array_equal(q.scale_codes.numpy(), e4)
    for sf in ("bf16", "float32"):
        q = gq.quantize(x, "fp4_e2m1", scale_format=sf)
        assert q.scale_codes is None and q.tensor_scale is None
        assert torch.equal(q.dequantize(), gq.fake_quant(x, "fp4_e2m1", scale_format=sf))
    bf = gq.quantize(x, "fp4_e2m1", scale_format="bf16").scale
    assert torch.equal(bf, bf.to(torch.bfloat16).float())
    # scale_mode='float' alone means float32 scales
    assert torch.equal(gq.fake_quant(x, "fp4_e2m1", scale_mode="float"),
                       gq.fake_quant(x, "fp4_e2m1", scale_format="float32"))


def test_scale_format_names():
    assert get_scale_format("e5m0").bit_width == 5 and get_scale_format("E8M0") == get_scale_format("e8m0")
    ue = get_scale_format("ue4m3")
    assert (ue.min_value, ue.max_value, ue.nan_code, ue.bit_width) == (2.0 ** -6, 448.0, 0x7F, 8)
    u53 = get_scale_format("ue5m3")
    assert (u53.min_value, u53.max_value, u53.nan_code) == (2.0 ** -14, oracle.MiniScale(5, 3).max_normal, 0xFF)
    assert get_scale_format("ue5m2").max_value == 98304.0  # not float8_e5m2's 57344: NaN-only top binade
    assert get_scale_format("bf16") == get_scale_format("bfloat16")


PROPS = settings(max_examples=30, deadline=None)


@PROPS
@given(x=arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 40)),
                elements=st.floats(-2.0 ** 24, 2.0 ** 24, width=32)),
       shift=st.integers(-110, 100), scale=st.sampled_from(list(SCALES)), fmt=st.sampled_from(ELEMENTS),
       block=st.sampled_from([8, 16, 32]), ts=st.booleans())
def test_property_matches_oracle(x, shift, scale, fmt, block, ts):
    x = (x.astype(np.float64) * 2.0 ** shift).astype(np.float32)
    check(x, fmt, scale, block, -1, ts and scale in MINIFLOATS, "hypothesis")


def test_bad_arguments_name_the_setting():
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="scale_mode"):
        gq.fake_quant(x, "fp4_e2m1", scale_format="e8m0", scale_mode="float")
    with pytest.raises(ValueError, match="scale_mode"):
        gq.fake_quant(x, "fp4_e2m1", scale_format="ue4m3", scale_mode="floor")
    with pytest.raises(ValueError, match="scale_mode"):
        gq.quantize(x, "fp4_e2m1", scale_format="bf16", scale_mode="rceil")
    for sf in ("e8m0", "e5m0", "bf16", "float32"):
        with pytest.raises(ValueError, match="tensor_scale"):
            gq.fake_quant(x, "fp4_e2m1", scale_format=sf, tensor_scale=True)
    for bad in ("e9m0", "e1m0", "fp8", "ue4m3x", "e4m3"):
        with pytest.raises(ValueError, match="scale_format"):
            gq.fake_quant(x, "fp4_e2m1", scale_format=bad)
    assert get_scale_format("ue4m4").bit_width == 8  # unsigned: 4 + 4 bits fit in a byte
    for nine_bits in ("ue5m4", "ue4m5"):
        with pytest.raises(ValueError, match="scale_format.*at most 8 bits"):
            gq.fake_quant(x, "fp4_e2m1", scale_format=nine_bits)
    with pytest.raises(ValueError, match="e8m1"):  # the element-format range check fires first (names the format)
        gq.fake_quant(x, "fp4_e2m1", scale_format="ue8m1")
    with pytest.raises(ValueError, match="exponent bits"):
        gq.fake_quant(x, "fp4_e2m1", scale_format="ue1m3")
    with pytest.raises(TypeError, match="scale_format"):
        gq.fake_quant(x, "fp4_e2m1", scale_format=8)
    with pytest.raises(ValueError, match="block_size"):
        gq.fake_quant(x, "nvfp4", 32)


@pytest.mark.parametrize("bits", [3, 4, 5])
@pytest.mark.parametrize("fmt", ELEMENTS + ["int4"])
def test_e_k_m0_not_saturating_makes_blocks_above_its_top_nan(bits, fmt):
    """ExponentScale(k, saturating=False) (microxcaling's scale_bits): a block whose floor rule
    exponent floor(log2 amax) - emax (math.frexp, float64) exceeds 2**(k-1) - 1 is NaN, scale and
    values, with the NaN code; every other block is the saturating E{k}M0's (checked against the
    oracle above). Reference and native op."""
    from groupquant.formats import ExponentScale
    x = torch.from_numpy(wide((16, 96), seed=bits))
    sf = ExponentScale(bits, saturating=False)
    spec = make_spec(x, fmt, 16, -1, scale_format=sf)
    sat = reference_quantize(x, make_spec(x, fmt, 16, -1, scale_format=f"e{bits}m0"))
    amax = x.abs().reshape(16, 6, 16).amax(-1).double()
    over = torch.tensor([[v > 0 and math.frexp(v)[1] - 1 - spec.fmt.emax > 2 ** (bits - 1) - 1 for v in row]
                         for row in amax.tolist()])
    assert over.any() and not over.all()
    runs = [("reference", reference_fake_quant(x, spec)[0], reference_quantize(x, spec))]
    if NATIVE:
        runs.append(("native", native_fake_quant(x, spec), native_quantize(x, spec)))
    for name, value, q in runs:
        nan_blocks = value.reshape(16, 6, 16).isnan()
        assert torch.equal(nan_blocks, over[..., None].expand(16, 6, 16)), name
        want_codes = torch.where(over, 2 ** bits - 1, sat.scale_codes.reshape(16, 6)).to(torch.uint8)
        assert torch.equal(q.scale_codes.reshape(16, 6), want_codes), name
        assert torch.equal(torch.where(nan_blocks, 0.0, value.reshape(16, 6, 16)),
                           torch.where(nan_blocks, 0.0, sat.dequantize().reshape(16, 6, 16))), name


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("fmt", ELEMENTS)
def test_e_k_m0_flushing_subnormal_blocks_zeroes_them(bits, fmt):
    """ExponentScale(k, flush_subnormal_blocks=True) (microxcaling's mx_flush_fp32_subnorms): a block
    whose amax is a nonzero float32 subnormal is quantized as the all-zero block x * 0 (signed zeros),
    scale code 0; every other block is the plain E{k}M0's. Reference and native op."""
    from groupquant.formats import ExponentScale
    x = torch.from_numpy(wide((16, 96), seed=bits, lo=-160, hi=-100))
    x[0, :16] = 0.0
    sf = ExponentScale(bits, flush_subnormal_blocks=True)
    spec = make_spec(x, fmt, 16, -1, scale_format=sf)
    blocks = x.reshape(16, 6, 16)
    amax = blocks.abs().amax(-1)
    flushed = (amax > 0) & (amax < 2.0 ** -126)
    assert flushed.any() and not flushed.all()
    zeroed = torch.where(flushed[..., None], blocks * 0.0, blocks).reshape(16, 96)
    plain = reference_quantize(zeroed, make_spec(x, fmt, 16, -1, scale_format=f"e{bits}m0"))
    want = plain.dequantize().reshape(16, 6, 16)
    runs = [("reference", reference_fake_quant(x, spec)[0], reference_quantize(x, spec))]
    if NATIVE:
        runs.append(("native", native_fake_quant(x, spec), native_quantize(x, spec)))
    for name, value, q in runs:
        assert torch.equal(value.reshape(16, 6, 16), want) and torch.equal(value.signbit().reshape(16, 6, 16),
                                                                            want.signbit()), name
        assert torch.equal(q.scale_codes.reshape(16, 6), plain.scale_codes.reshape(16, 6)), name
        assert not q.scale_codes.reshape(16, 6)[flushed].any(), name
