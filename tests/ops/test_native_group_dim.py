"""Grouping along a leading or middle dim (dim 0 of [N, C], dim 1 of [B, T, C]) in the native op.

The CPU kernel has its own path when the grouped dim is not the last (inner > 1): tiles of one
block of rows times a chunk of contiguous columns, a running amax per column, then a second pass
over the same rows. Here it must reproduce the PyTorch reference bit for bit: every MX format,
scale mode, rounding (stochastic too: the hash of each element's linear index), dtype, padding
(the dim not a multiple of the block), NaN / Inf / zero / subnormal blocks, saturating=False,
column counts that are not a multiple of the kernel's column chunk, and non-contiguous inputs.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import groupquant as gq
from groupquant.ops import make_spec, native, reference_fake_quant, reference_quantize
from test_native import DTYPES, FORMATS, ROUNDINGS, SCALE_MODES, assert_same, check_against_reference, make_input

pytestmark = pytest.mark.skipif(not native.load(), reason="native kernels unavailable (no compiler)")

MX = ("int8", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1")
# (shape, dim, block): dim 0 exact and padded, a middle dim exact and padded, a one-column-wide
# and a whole-dim block, a 4-d tensor grouped along dim 1 (inner = 2 * 6)
LAYOUTS = [((64, 24), 0, 32), ((45, 19), 0, 32), ((2, 64, 12), 1, 32), ((3, 41, 10), 1, 16),
           ((40, 1, 3), 0, 32), ((37, 9), 0, None), ((2, 35, 2, 6), 1, 32)]


@pytest.mark.parametrize("name", MX)
def test_leading_and_middle_dims_match_reference(name: str) -> None:
    fmt = FORMATS[name]
    for i, (shape, dim, block) in enumerate(LAYOUTS):
        for scale_mode in SCALE_MODES:
            for rounding in ROUNDINGS:
                dtype = DTYPES[(i + len(scale_mode) + len(rounding)) % len(DTYPES)]  # each dtype in turn
                x = make_input(shape, dim, dtype, seed=hash((name, i, scale_mode, rounding)) % 10_000)
                check_against_reference(x, fmt, block, dim, rounding, scale_mode)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_and_rounding_along_dim0(dtype: torch.dtype) -> None:
    for name in MX:
        for rounding in ROUNDINGS:
            x = make_input((70, 33), 0, dtype, seed=5)
            check_against_reference(x, FORMATS[name], 32, 0, rounding, "floor", seed=987654321)


def test_columns_beyond_one_chunk_and_long_blocks() -> None:
    # more columns than a work item takes (not a multiple of any chunk size), padded rows, a
    # whole-dim block of many rows, and several outer slices grouped along the middle dim
    for shape, dim, block in [((33, 2100), 0, 32), ((300, 40), 0, None), ((2, 33, 1100), 1, 32)]:
        for rounding in ("even", "stochastic"):
            x = make_input(shape, dim, torch.float32, seed=13)
            check_against_reference(x, FORMATS["fp8_e4m3"], block, dim, rounding, "floor")
            check_against_reference(x.bfloat16(), FORMATS["fp4_e2m1"], block, dim, rounding, "even")
        check_against_reference(x, FORMATS["int8"], block, dim, "nearest", "float")


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2", "fnuz_e5m2", "e3m4_ieee"])
def test_non_saturating_along_dim0(name: str) -> None:
    x = make_input((50, 17), 0, torch.float32, seed=21) * 3
    for scale_mode in ("floor", "ceil", "rceil"):
        for rounding in ("even", "stochastic"):
            check_against_reference(x, FORMATS[name], 32, 0, rounding, scale_mode, saturating=False)


def test_special_blocks_along_dim0() -> None:
    # columns holding NaN, +Inf, -Inf, all zeros, -0, all float32 subnormals, a lone max value
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(3))
    x[5, 0] = float("nan")
    x[40, 1] = float("inf")
    x[0, 2] = -float("inf")
    x[:, 3] = 0.0
    x[:, 4] = -0.0
    x[:, 5] = torch.finfo(torch.float32).tiny * torch.rand(64, generator=torch.Generator().manual_seed(4))
    x[7, 6] = torch.finfo(torch.float32).max
    for name in MX:
        for scale_mode in SCALE_MODES:
            for rounding in ("even", "stochastic"):
                check_against_reference(x, FORMATS[name], 32, 0, rounding, scale_mode)
                check_against_reference(x.bfloat16(), FORMATS[name], 32, 0, rounding, scale_mode)


@pytest.mark.parametrize("name", ["fp8_e4m3", "int8", "fp4_e2m1"])
def test_non_contiguous_inputs_grouped_along_leading_dims(name: str) -> None:
    base = make_input((48, 70), 0, torch.float32, seed=8)
    views = [(base.t(), 1), (base[::2], 0), (base[:, 3:60:2], 0), (base.view(48, 7, 10).permute(1, 0, 2), 1),
             (base.view(6, 8, 70).transpose(0, 1), 1)]
    for x, dim in views:
        assert not x.is_contiguous()
        for rounding in ("even", "stochastic"):
            for dtype in (torch.float32, torch.bfloat16):
                check_against_reference(x.to(dtype), FORMATS[name], 32, dim, rounding, "floor")


def test_public_api_along_dim0_and_middle_dim() -> None:
    for shape, dim in [((96, 40), 0), ((4, 70, 24), 1)]:
        x = make_input(shape, dim, torch.bfloat16, seed=2)
        for fmt in MX:
            spec = make_spec(x, fmt, 32, dim)
            ref = reference_fake_quant(x, spec)[0]
            assert_same(gq.fake_quant(x, fmt, 32, dim=dim), ref, f"fake_quant {fmt} dim={dim}")
            res = gq.ops.fake_quant_with_scale(x, fmt, 32, dim=dim)
            assert_same(res.value, ref, f"fake_quant_with_scale {fmt} dim={dim}")
            q, ref_q = gq.quantize(x, fmt, 32, dim=dim), reference_quantize(x, spec)
            assert torch.equal(q.codes, ref_q.codes), f"codes {fmt} dim={dim}"
            assert_same(res.scale, ref_q.scale, f"scale {fmt} dim={dim}")
            assert_same(q.dequantize(), ref, f"dequantize {fmt} dim={dim}")


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=2, max_size=4), dim_pick=st.integers(0, 2),
       block=st.sampled_from([1, 2, 5, 16, 32, None]), name=st.sampled_from(list(FORMATS)),
       scale_mode=st.sampled_from(SCALE_MODES), rounding=st.sampled_from(ROUNDINGS),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2 ** 16))
def test_random_layouts_not_along_the_last_dim(sizes, dim_pick, block, name, scale_mode, rounding, dtype, seed) -> None:
    dim = dim_pick % (len(sizes) - 1)  # never the last dim: inner > 1 unless trailing sizes are 1
    x = make_input(tuple(sizes), dim, dtype, seed=seed)
    check_against_reference(x, FORMATS[name], block, dim, rounding, scale_mode, seed=seed * 7919)
