"""The native op ``groupquant::tensor_scale`` (NVFP4's per-tensor second scale ``g``) against the
definition, :func:`groupquant.ops.tensor_scale_of` (torch ops), bit for bit: every dtype, tensors
spanning many binades, NaN / Inf / zero / -0 / subnormal tensors, a largest magnitude that is
negative, an amax so small that the 2^-126 floor applies, and float32 bit patterns drawn by
hypothesis; and its refusals of a record it cannot serve (by name, before any kernel runs)."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import groupquant as gq
from groupquant.ops import make_spec, native, tensor_scale_of
from groupquant.ops.kernel_params import kernel_params, op_params
from groupquant.ops.native_ops import native_tensor_scale

pytestmark = pytest.mark.skipif(not native.load(), reason="native kernels unavailable (no compiler)")

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SCALE_FORMATS = ("ue4m3", "ue5m3")  # NVFP4's, and one with a wider range (FP4 elements, blocks of 16)


def _spec(x: torch.Tensor, scale_format: str):
    if scale_format == "ue4m3":
        return make_spec(x, "nvfp4")
    return make_spec(x, "fp4_e2m1", 16, scale_mode="float", scale_format=scale_format, tensor_scale=True)


def _both(x: torch.Tensor, scale_format: str = "ue4m3"):
    spec = _spec(x, scale_format)
    return native_tensor_scale(x, spec), tensor_scale_of(x, spec.fmt, spec.scale_format)


def _assert_same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == torch.float32 and got.shape == () and got.device == want.device, what
    same = torch.equal(got.view(torch.int32), want.view(torch.int32)) or (got.isnan() and want.isnan())
    assert same, f"{what}: native {got.item()!r} ({got.view(torch.int32).item():#x}) vs definition {want.item()!r}"


def _cases(dtype: torch.dtype):
    g = torch.Generator().manual_seed(11)
    info = torch.finfo(dtype)
    wide = torch.randn(64, 96, generator=g) * torch.logspace(-6, 6, 96)
    yield "binades", wide.to(dtype)
    yield "negative largest", torch.tensor([-3000.0, 5.0, 2999.0]).to(dtype)
    yield "zeros", torch.zeros(7, dtype=dtype)
    yield "negative zeros", torch.full((5,), -0.0, dtype=dtype)
    yield "subnormals", (torch.arange(1, 9) * info.smallest_normal / 16).to(dtype)
    yield "the floor applies", torch.tensor([info.smallest_normal, -info.tiny]).to(dtype)
    yield "the largest finite", torch.tensor([info.max, -info.max, 1.0], dtype=dtype)
    yield "one element", torch.tensor([-1.5], dtype=dtype)
    for bad in (float("nan"), float("inf"), float("-inf")):
        x = wide.to(dtype).clone()
        x[17, 3] = bad
        yield f"holding {bad}", x
    yield "3-d", wide.reshape(4, 16, 96).to(dtype)


@pytest.mark.parametrize("scale_format", SCALE_FORMATS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_native_tensor_scale_equals_the_definition_bit_for_bit(dtype: torch.dtype, scale_format: str) -> None:
    for what, x in _cases(dtype):
        got, want = _both(x, scale_format)
        _assert_same(got, want, f"{what}, {dtype}")
    assert torch.isnan(_both(torch.tensor([1.0, float("nan")], dtype=dtype))[0])  # the definition's rule, held


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=5), st.sampled_from(DTYPES))
def test_native_tensor_scale_on_drawn_float32_bit_patterns(words, dtype: torch.dtype) -> None:
    bits = torch.tensor([w - 2 ** 32 if w >= 2 ** 31 else w for w in words], dtype=torch.int32)
    x = bits.view(torch.float32).to(dtype)
    got, want = _both(x)
    _assert_same(got, want, f"{x.tolist()}")


def test_native_tensor_scale_of_an_empty_tensor_is_one_and_a_view_reads_its_elements() -> None:
    got, want = _both(torch.empty(0, 4))
    _assert_same(got, want, "empty")
    assert got.item() == 1.0
    base = torch.arange(-40.0, 40.0).reshape(8, 10)
    view = base[:, 2:5].t()  # not contiguous, offset storage: the op reduces the view's elements only
    _assert_same(_both(view)[0], _both(view.contiguous())[1], "view")


def test_fake_quant_and_quantize_carry_the_native_tensor_scale() -> None:
    x = (torch.randn(16, 64) * torch.logspace(-3, 3, 64)).to(torch.bfloat16)
    q = gq.quantize(x, "nvfp4")
    spec = make_spec(x, "nvfp4")
    _assert_same(q.tensor_scale, tensor_scale_of(x, spec.fmt, spec.scale_format), "quantize")
    from groupquant.ops import reference_fake_quant
    assert torch.equal(gq.fake_quant(x, "nvfp4").view(torch.int16), reference_fake_quant(x, spec)[0].view(torch.int16))


def test_tensor_scale_op_refuses_what_it_cannot_serve_by_name() -> None:
    x = torch.randn(4, 32)
    record = kernel_params(make_spec(x, "nvfp4"), x.dtype)
    op = torch.ops.groupquant.tensor_scale
    with pytest.raises(ValueError, match="tensor_scale needs params that ask for a per-tensor scale"):
        op(x, op_params(make_spec(x, "nvfp4", tensor_scale=False), x.dtype))
    with pytest.raises(ValueError, match="tensor_scale needs params"):
        op(x, op_params(make_spec(x, "fp8_e4m3"), x.dtype))
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        op(x.double(), record.pack())
    with pytest.raises(ValueError, match="params must hold"):
        op(x, record.pack()[:-1])
    with pytest.raises(ValueError, match="scale_kind must be"):  # the format's checks: the group ops' own
        op(x, dataclasses.replace(record, scale_kind=7).pack())
    with pytest.raises(ValueError, match="divisor scale_max \\* max_normal must be exact in float32"):
        op(x, dataclasses.replace(record, max_normal=6.0 + 2.0 ** -21).pack())
