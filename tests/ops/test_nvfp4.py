"""NVFP4 (two-level and single-level) against the independent numpy/ml_dtypes oracle (nvfp4_oracle.py):
the reference and the native op, values, element codes, UE4M3 scale bytes and the tensor scale bit for
bit, on adversarial data; hypothesis properties; compile, gradients and argument errors."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import groupquant as gq
import nvfp4_oracle as oracle
from nvfp4_oracle import E2M1_MID, E2M1_POS, adversarial, assert_bits
from groupquant.ops import api, make_spec, native, reference_fake_quant, reference_quantize
from groupquant.ops.native_ops import native_fake_quant, native_quantize

NATIVE = native.load()
TORCH_TO_NP = {torch.float32: np.float32, torch.bfloat16: ml_dtypes.bfloat16, torch.float16: np.float16}
#: every positive normal UE4M3 value, 2**-6 .. 448 (codes 8 .. 126), from ml_dtypes
UE4M3_NORMALS = np.arange(8, 127, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def paths(x: torch.Tensor, spec):
    """(name, fake-quant values, GroupQuantized) from the reference, the native op and the public API."""
    out = [("reference", reference_fake_quant(x, spec)[0], reference_quantize(x, spec))]
    if NATIVE:
        out.append(("native", native_fake_quant(x, spec), native_quantize(x, spec)))
    return out


def check(x_np: np.ndarray, dim: int = -1, two_level: bool = True, what: str = "") -> oracle.OracleResult:
    """Every path against the oracle: values, element codes, scales, UE4M3 bytes, tensor scale; and
    ``quantize().dequantize() == fake_quant()`` bitwise."""
    want = oracle.nvfp4(x_np, dim, two_level)
    if x_np.dtype == ml_dtypes.bfloat16:
        x = torch.from_numpy(x_np.view(np.int16)).view(torch.bfloat16)
    else:
        x = torch.from_numpy(np.ascontiguousarray(x_np))
    spec = make_spec(x, "nvfp4", dim=dim, tensor_scale=two_level)
    what = f"{what} {x.dtype} {tuple(x.shape)} dim={dim} two_level={two_level}"
    public = gq.fake_quant(x, "nvfp4", dim=dim, tensor_scale=two_level)
    assert_bits(public, want.output, f"public fake_quant {what}")
    for name, value, q in paths(x, spec):
        w = f"{name} {what}"
        assert value.dtype == x.dtype
        assert_bits(value, want.output, f"values {w}")
        assert q.codes.dtype == torch.uint8
        assert np.array_equal(q.codes.numpy().astype(np.int64), want.codes), f"element codes {w}"
        assert_bits(q.scale, want.scale, f"block scales {w}")
        assert q.scale_codes is not None and q.scale_codes.dtype == torch.uint8
        assert np.array_equal(q.scale_codes.numpy().astype(np.int64), want.scale_codes), f"UE4M3 bytes {w}"
        if two_level:
            assert q.tensor_scale is not None and q.tensor_scale.shape == () and q.tensor_scale.dtype == torch.float32
            assert_bits(q.tensor_scale, np.asarray(want.tensor_scale, dtype=np.float32), f"tensor scale {w}")
        else:
            assert q.tensor_scale is None
        assert_bits(q.dequantize(), want.output, f"dequantize {w}")
    return want


def f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


# ---- the oracle's own footing -------------------------------------------------------------------

def test_oracle_ue4m3_is_e4m3fn_with_sign_zero():
    grid = oracle.minifloat_grid(4, 3)
    e4 = np.arange(127, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert np.array_equal(grid, e4) and grid[-1] == 448.0 and oracle.UE4M3.min_normal == 2.0 ** -6
    s = np.concatenate([UE4M3_NORMALS, (UE4M3_NORMALS[:-1] + UE4M3_NORMALS[1:]) / 2,
                        np.nextafter(UE4M3_NORMALS, np.float32(0))[1:]]).astype(np.float32)
    v1, c1 = oracle.ue4m3_round(s)
    v2, c2 = oracle.UE4M3.round(s)
    assert np.array_equal(v1, v2) and np.array_equal(c1, c2)


# ---- adversarial data ---------------------------------------------------------------------------

def tie_blocks(two_level: bool) -> np.ndarray:
    """One block per UE4M3 normal value s: amax 6*s and every E2M1 midpoint and grid point times s, both signs.

    Two-level: the tensor amax is 2688 * 2**3, so g = 8 exactly and the scaled values x * ((1/g)/s)
    hit the midpoints exactly wherever (1/g)/s is exact (powers of two s); the others check that the
    rounding of (1/g)/s is followed. Single-level: x / s is the midpoint exactly for every s."""
    g = 8.0 if two_level else 1.0
    rows = []
    for s in UE4M3_NORMALS.astype(np.float64):
        rows.append([6, *E2M1_MID, *[-m for m in E2M1_MID], -6])
        rows.append([6, *E2M1_POS[:-1], *[-m for m in E2M1_POS[1:-1]], -0.0, -6])
        rows[-1] = [v * s * g for v in rows[-1]]
        rows[-2] = [v * s * g for v in rows[-2]]
    x = f32(rows)
    if two_level:
        assert np.abs(x).max() == 2688 * 8
    return x


@pytest.mark.parametrize("two_level", [True, False])
def test_ties_at_every_e2m1_midpoint_for_every_ue4m3_scale(two_level):
    x = tie_blocks(two_level)
    want = check(x, -1, two_level, "ties")
    # where the tie is exact (every s single-level; powers of two s two-level) it goes to even:
    # 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4
    exact = (np.frexp(UE4M3_NORMALS)[0] == 0.5) if two_level else np.ones(len(UE4M3_NORMALS), bool)
    mid_rows = want.elements[0::2, 0][exact]
    assert np.array_equal(mid_rows[:, 1:8], np.tile(f32([0, 1, 1, 2, 2, 4, 4]), (int(exact.sum()), 1)))
    assert np.array_equal(mid_rows[:, 8:15], -mid_rows[:, 1:8])


@pytest.mark.parametrize("two_level", [True, False])
def test_ties_of_the_block_scale_at_every_ue4m3_midpoint(two_level):
    # (amax_block / 6) / g lands exactly between two UE4M3 values: the scale rounds to the even code
    mids = (UE4M3_NORMALS[:-1].astype(np.float64) + UE4M3_NORMALS[1:]) / 2
    g = 4.0 if two_level else 1.0
    rows = [[6 * m * g] + [m * g * v for v in (0.3, -1.1, 2.9, 5.0)] + [0.0] * 11 for m in mids]
    rows.append([2688 * g] + [0.0] * 15)
    want = check(f32(rows), -1, two_level, "scale ties")
    assert np.all(want.scale_codes[:-1, 0, 0] % 2 == 0)


@pytest.mark.parametrize("two_level", [True, False])
def test_scales_below_e4m3_min_normal_and_wide_dynamic_range(two_level):
    # block amax from 2**-140 to 2**100 (one binade per block, plus odd mantissas): block scales that
    # clamp to 2**-6, that would be e4m3 subnormals, and blocks that vanish next to the tensor's amax
    rng = np.random.default_rng(1)
    rows = []
    for e in range(-140, 101, 3):
        mant = rng.uniform(1, 2, 16) * rng.choice([-1, 1], 16)
        rows.append(np.ldexp(mant * rng.uniform(0, 1, 16) ** 2, e))
    x = f32(rows)
    check(x, -1, two_level, "dynamic range")
    check(x[:40], -1, two_level, "dynamic range, small part")
    check(x[-20:] * f32(2.0 ** -80), -1, two_level, "dynamic range, shifted")


@pytest.mark.parametrize("two_level", [True, False])
def test_zero_blocks_and_all_zero_tensor(two_level):
    x = np.zeros((3, 48), dtype=np.float32)
    x[1, 16:32] = np.linspace(-3, 7, 16)
    x[2, 5] = -0.0
    check(x, -1, two_level, "zero blocks")
    want = check(np.zeros((2, 40), dtype=np.float32), -1, two_level, "all zero")
    assert np.all(want.output == 0) and np.all(want.scale_codes == 8)  # 2**-6
    if two_level:
        assert want.tensor_scale == np.float32(2.0 ** -126)
    neg = check(-np.zeros((2, 16), dtype=np.float32), -1, two_level, "all -0")
    assert np.all(np.signbit(neg.output))


@pytest.mark.parametrize("two_level", [True, False])
def test_tiny_tensors_below_2688_times_min_normal(two_level):
    # amax < 2688 * 2**-126 (~3.2e-35): g is clamped to 2**-126; float32 subnormal inputs
    for amax_e in (-116, -120, -126, -135, -149):
        rng = np.random.default_rng(amax_e + 200)
        x = f32(np.ldexp(rng.uniform(-1, 1, (4, 37)), amax_e))
        x[0, 0] = np.float32(np.ldexp(1.0, amax_e))
        want = check(x, -1, two_level, f"tiny 2**{amax_e}")
        if two_level and amax_e <= -116:
            assert want.tensor_scale == np.float32(2.0 ** -126)
    check(f32([[1.4e-45, -2.8e-45, 0.0] + [0.0] * 13]), -1, two_level, "smallest subnormals")


@pytest.mark.parametrize("two_level", [True, False])
def test_saturation(two_level):
    # scaled values beyond 6: a block scale rounded down ((amax/6)/g just above a UE4M3 value, not
    # enough to round up) and, single-level, amax_block / 6 beyond 448 (scale clamps to 448)
    rows = []
    for s in UE4M3_NORMALS[::7].astype(np.float64):
        rows.append([6 * s * 1.06, -6 * s * 1.05, 6 * s * 1.03, 5.9 * s] + [s] * 12)
    rows.append([2688.0 * 0.999] + [1.0] * 15)
    rows.append([3e5, -1e6, 2688.0 * 1.5, 448 * 6.5] + [100.0] * 12)
    want = check(f32(rows), -1, two_level, "saturation")
    assert np.any(np.abs(want.scaled) > 6) and np.all(np.abs(want.elements) <= 6)
    if not two_level:
        assert want.scale[-1, 0, 0] == 448 and np.abs(want.elements[-1, 0, :3]).tolist() == [6, 6, 6]


def test_nan_or_inf_anywhere_makes_the_two_level_tensor_nan():
    for bad in (np.nan, np.inf, -np.inf):
        x = np.random.default_rng(3).standard_normal((3, 40)).astype(np.float32)
        x[2, 39] = bad
        want = check(x, -1, True, f"two-level {bad}")
        assert np.isnan(want.tensor_scale) and np.all(np.isnan(want.output))
        assert np.all(want.scale_codes == 0x7F) and np.all(want.codes == 0)


def test_nan_or_inf_makes_only_its_block_nan_single_level():
    x = np.random.default_rng(4).standard_normal((3, 40)).astype(np.float32)
    x[0, 3], x[1, 20], x[2, 39] = np.nan, np.inf, -np.inf
    want = check(x, -1, False, "single-level NaN/Inf")
    nan_block = want.scale_codes[:, :, 0] == 0x7F
    assert nan_block.tolist() == [[True, False, False], [False, True, False], [False, False, True]]
    assert np.all(np.isnan(want.output[0, :16])) and not np.any(np.isnan(want.output[0, 16:]))


@pytest.mark.parametrize("two_level", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,dim", [((5, 64), -1), ((3, 50), -1), ((7, 3), -1), ((37, 6), 0), ((4, 21, 5), 1),
                                       ((2, 33, 3, 2), -3), ((40,), 0)])
def test_layouts_and_dtypes(shape, dim, dtype, two_level):
    x = adversarial(shape, seed=hash((shape, dim)) % 1000)
    if dtype == torch.float16:  # keep the binades of float16
        x = np.clip(x * np.float32(2.0 ** -12), -60000, 60000)
    check(x.astype(TORCH_TO_NP[dtype]), dim, two_level, "layout")


@pytest.mark.parametrize("two_level", [True, False])
def test_every_bf16_and_fp16_value(two_level):
    # every finite bf16 / fp16 value once, shuffled into blocks: all binades mixed (float16's max
    # and subnormals too)
    for np_dtype, uint in ((ml_dtypes.bfloat16, np.uint16), (np.float16, np.uint16)):
        v = np.arange(2 ** 16, dtype=uint).view(np_dtype)
        v = v[np.isfinite(v.astype(np.float32))]
        v = np.random.default_rng(7).permutation(v)[: (len(v) // 16) * 16]
        check(v.reshape(-1, 16 * 8), -1, two_level, f"sweep {np.dtype(np_dtype).name}")
        check(np.sort(v.astype(np.float32)).astype(np_dtype).reshape(-1, 16 * 8), -1, two_level,
              f"sorted sweep {np.dtype(np_dtype).name}")


def test_quantize_fields_and_scale_bytes_are_e4m3fn_bytes():
    x = adversarial((6, 70), seed=11)
    q = gq.quantize(torch.from_numpy(x), "nvfp4")
    assert q.block_size == 16 and q.codes.shape == (6, 5, 16) and q.scale.shape == (6, 5, 1)
    assert q.scale_format.name == "ue4m3"
    e4 = q.scale.numpy().astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert np.array_equal(q.scale_codes.numpy(), e4) and int(q.scale_codes.max()) <= 126
    g = np.float32(np.abs(x).max()) / np.float32(2688)
    assert q.tensor_scale.item() == g
    fq = gq.ops.fake_quant_with_scale(torch.from_numpy(x), "nvfp4")
    assert torch.equal(fq.scale, q.scale) and torch.equal(fq.tensor_scale, q.tensor_scale)
    assert torch.equal(fq.value, q.dequantize())
    single = gq.ops.fake_quant_with_scale(torch.from_numpy(x), "nvfp4", tensor_scale=False)
    assert single.tensor_scale is None


def test_nvfp4_equals_spelled_out_settings():
    x = torch.from_numpy(adversarial((4, 96), seed=12))
    for ts in (True, False):
        a = gq.fake_quant(x, "nvfp4", tensor_scale=ts)
        b = gq.fake_quant(x, "fp4_e2m1", 16, scale_format="ue4m3", tensor_scale=ts)
        c = gq.fake_quant(x, "fp4_e2m1", 16, scale_mode="float", scale_format="ue4m3", tensor_scale=ts)
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))
        assert torch.equal(b.view(torch.int32), c.view(torch.int32))


# ---- hypothesis properties ----------------------------------------------------------------------

PROPS = settings(max_examples=30, deadline=None)


@st.composite
def tensors(draw) -> np.ndarray:
    rows, cols = draw(st.integers(1, 4)), draw(st.integers(1, 40))
    v = draw(arrays(np.float32, (rows, cols), elements=st.floats(-2.0 ** 20, 2.0 ** 20, width=32)))
    shift = draw(st.integers(-100, 100))
    return (v.astype(np.float64) * 2.0 ** shift).astype(np.float32)


@PROPS
@given(x=tensors(), dim=st.sampled_from([0, -1]), two_level=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_property_matches_oracle(x, dim, two_level, dtype):
    check(x.astype(TORCH_TO_NP[dtype]), dim, two_level, "hypothesis")


@PROPS
@given(x=arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 48)),
                elements=st.floats(-2.0 ** 20, 2.0 ** 20, width=32, allow_subnormal=False)),
       k=st.integers(-40, 40))
def test_property_two_level_is_invariant_to_powers_of_two(x, k):
    # g scales by 2**k, block scales and element codes stay (no clamp of g, no subnormals on the way)
    x = np.where(np.abs(x) < 2.0 ** -20, np.float32(0), x)
    x[0, 0] = np.float32(1.0)
    t, t2 = torch.from_numpy(x), torch.from_numpy((x.astype(np.float64) * 2.0 ** k).astype(np.float32))
    q, q2 = gq.quantize(t, "nvfp4"), gq.quantize(t2, "nvfp4")
    assert torch.equal(q.codes, q2.codes) and torch.equal(q.scale_codes, q2.scale_codes)
    assert q2.tensor_scale.item() == q.tensor_scale.item() * 2.0 ** k
    assert torch.equal(gq.fake_quant(t2, "nvfp4"), gq.fake_quant(t, "nvfp4") * 2.0 ** k)


@PROPS
@given(x=tensors(), two_level=st.booleans())
def test_property_signs_kept(x, two_level):
    # the public op (native when built): equal to the oracle, and no value changes sign
    want = oracle.nvfp4(x, -1, two_level)
    y = gq.fake_quant(torch.from_numpy(x), "nvfp4", tensor_scale=two_level).numpy()
    assert_bits(torch.from_numpy(y), want.output, "hypothesis")
    ok = np.isfinite(x)
    assert np.all((np.sign(y[ok]) == np.sign(x[ok])) | (y[ok] == 0))


# ---- compile, gradients, errors -----------------------------------------------------------------

@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile unavailable")
def test_torch_compile_fullgraph_same_bits():
    # aot_eager: dynamo without graph breaks, the fake kernels and AOTAutograd, eager kernels (no C++ build)
    x = torch.from_numpy(adversarial((8, 40), seed=13))
    for two_level in (True, False):
        torch._dynamo.reset()
        f = torch.compile(lambda t: gq.fake_quant(t, "nvfp4", tensor_scale=two_level), fullgraph=True,
                          backend="aot_eager")
        assert_bits(f(x), oracle.nvfp4(x.numpy(), -1, two_level).output, f"compiled two_level={two_level}")
        leaf = x.clone().requires_grad_()
        f(leaf).sum().backward()
        assert torch.equal(leaf.grad, torch.ones_like(x))


@pytest.mark.parametrize("use_native", [True, False])
@pytest.mark.parametrize("two_level", [True, False])
def test_gradients_pass_straight_through(monkeypatch, use_native, two_level):
    if use_native and not NATIVE:
        pytest.skip("native kernels unavailable")
    monkeypatch.setitem(native._SERVED, "cpu", use_native)
    x_np = adversarial((4, 40), seed=14)
    x_np[0, :3] = [1e6, -1e6, 3e5]  # saturating elements (single-level)
    x = torch.from_numpy(x_np).requires_grad_()
    grad = torch.randn(x.shape)
    y = gq.fake_quant(x, "nvfp4", tensor_scale=two_level)
    y.backward(grad)
    assert torch.equal(x.grad, grad)
    assert_bits(y, oracle.nvfp4(x_np, -1, two_level).output, "values with grad")
    x.grad = None
    gq.fake_quant(x, "nvfp4", tensor_scale=two_level, ste="clipped").backward(grad)
    inside = oracle.from_blocks(np.abs(oracle.nvfp4(x_np, -1, two_level).scaled) <= 6, -1, x.shape)
    assert torch.equal(x.grad, grad * torch.from_numpy(inside))


def test_bad_arguments_name_the_setting():
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="block_size"):
        gq.fake_quant(x, "nvfp4", 32)
    with pytest.raises(ValueError, match="block_size"):
        gq.quantize(x, "nvfp4", block_size=None)
    with pytest.raises(ValueError, match="scale_format"):
        gq.fake_quant(x, "nvfp4", scale_format="e8m0")
    with pytest.raises(ValueError, match="scale_mode"):
        gq.fake_quant(x, "nvfp4", scale_mode="floor")
    with pytest.raises(TypeError, match="tensor_scale"):
        gq.fake_quant(x, "nvfp4", tensor_scale=1)
