"""bfloat16 inputs to the packed GEMM on every CPU path, the AVX-512 BF16 kernel of the
``avx512_bf16`` path included (csrc/packed_gemm_stream_avx512_bf16.cpp): outputs in bfloat16,
the float32 result (before the bfloat16 rounding) within float32 GEMM error of a float64
composition of the same bfloat16 input and the fake-quant weight, per element, for data that
makes mistakes visible: weights over many binades, padded K, NVFP4 pairs of blocks, NaN scale
blocks, Inf inputs, subnormal activations, rows whose range is wider than the kernel's rule."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from groupquant.ops import packed_gemm_cpu_path as cpu
from groupquant.ops.packed_gemm import packed_linear

from test_packed_gemm_cpu_path import INT4, PATHS, packed, path  # noqa: F401  (the path fixture)

BF16_PATHS = ("avx512_bf16",) + tuple(p for p in PATHS if p != "avx512_bf16")


def _bound(x: torch.Tensor, deq: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per element: the cross-path float32 contract, 1e-5 * (|x| @ |W| + |b|)."""
    return 1e-5 * (F.linear(x.double().abs(), deq.double().abs()) + b.double().abs()) + 1e-30


def check(x: torch.Tensor, pw, deq: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """packed_linear(x bf16) against float64 F.linear of the same bfloat16 input and the
    fake-quant weight: bfloat16 output of the right shape, NaN / Inf where the reference has
    them, every finite element within the float32 contract plus one bfloat16 rounding of the
    result (2^-9 relative; 2^-8 allowed for the float32 error pushing it over a tie)."""
    y = packed_linear(x, pw, b)
    assert y.dtype == torch.bfloat16 and y.shape == (x.shape[0], deq.shape[0])
    ref = F.linear(x.double(), deq.double(), b.double())
    slack = _bound(x, deq, b) + ref.abs() * 2.0 ** -8
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), "NaN positions differ"
    assert torch.equal(torch.isinf(y) & fin.logical_not(), torch.isinf(ref))
    assert bool(((y.double() - ref).abs()[fin] <= slack[fin]).all())
    return y


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 9])
@pytest.mark.parametrize("name,block,k", [("fp4_e2m1", 32, 256), ("fp4_e2m1", 32, 100), ("fp4_e2m1", 64, 384),
                                          ("fp4_e2m1", 128, 256), ("fp4_e2m1", 256, 512), ("fp4_e2m1", 8, 128),
                                          ("nvfp4", 16, 256), ("nvfp4", 16, 208), ("int4", 32, 256),
                                          ("fp8_e4m3", 32, 128)])
def test_bf16_input_within_float32_gemm_error_on_every_path(path, name, block, k, rows):  # noqa: F811
    torch.manual_seed(rows * 7 + k)
    w = torch.randn(70, k) * torch.logspace(-6, 6, k, base=2.0)  # block scales over many binades
    b = torch.randn(70)
    pw, deq = packed(INT4 if name == "int4" else name, w, block)
    x = (torch.randn(rows, k) * torch.logspace(-8, 8, k, base=2.0)[torch.randperm(k)]).bfloat16()
    check(x, pw, deq, b)


def test_bf16_kernel_and_float32_kernel_agree_on_a_4096_layer():
    """The decode shape (K = 4096, MXFP4 and batch 1 / 4): the avx512_bf16 path's bfloat16 output
    and the avx512 path's (float32 kernel on the widened input) are at most one bfloat16
    rounding apart each, plus the float32 contract."""
    if "avx512_bf16" not in cpu.available_cpu_paths():
        pytest.skip(f"this host has no avx512_bf16 path (it has {', '.join(cpu.available_cpu_paths()) or 'none'})")
    torch.manual_seed(11)
    for name in ("fp4_e2m1", "nvfp4"):
        pw, deq = packed(name, torch.randn(256, 4096))
        for rows in (1, 4):
            x = torch.randn(rows, 4096).bfloat16()
            ref = F.linear(x.double(), deq.double())
            with cpu.cpu_path("avx512_bf16"):
                y16 = packed_linear(x, pw).double()
            with cpu.cpu_path("avx512"):
                y32 = packed_linear(x, pw).double()
            ulp = ref.abs() * 2.0 ** -8 + 1e-5 * F.linear(x.double().abs(), deq.double().abs())
            assert bool(((y16 - y32).abs() <= 2 * ulp).all()), (name, rows)


@pytest.mark.parametrize("rows", [1, 4])
def test_subnormal_and_wide_range_activations(path, rows):  # noqa: F811
    """Subnormal bfloat16 activations count (the BF16 kernel scales each row by a power of two
    first); a row whose magnitudes span more than 2^100 is still right (that call runs the
    float32 kernel)."""
    torch.manual_seed(rows)
    k = 256
    w = torch.randn(40, k)
    b = torch.zeros(40)
    pw, deq = packed("fp4_e2m1", w)
    tiny = torch.randn(rows, k) * 2.0 ** -130  # every activation a bfloat16 subnormal
    x = tiny.bfloat16()
    assert bool((x.float().abs() < 2.0 ** -126).all()) and bool((x != 0).any())
    y = check(x, pw, deq, b)
    assert bool((y != 0).any()), "subnormal activations were flushed"
    mixed = torch.randn(rows, k)
    mixed[:, ::3] *= 2.0 ** -128  # subnormal beside normal: range 2^128 in one row
    y_mixed = check(mixed.bfloat16(), pw, deq, b)
    if "avx512_bf16" in cpu.available_cpu_paths() and path == "avx512_bf16":
        with cpu.cpu_path("avx512"):  # outside the BF16 kernel's range rule: the float32 kernel, bit for bit
            assert torch.equal(packed_linear(mixed.bfloat16(), pw, b).view(torch.int16), y_mixed.view(torch.int16))
    check((torch.randn(rows, k) * 2.0 ** 120).bfloat16(), pw, deq, b)  # large activations
    check((torch.randn(rows, k) * 2.0 ** -120).bfloat16(), pw, deq, b)  # small normal activations


@pytest.mark.parametrize("rows", [1, 5])
def test_nan_scale_and_inf_input(path, rows):  # noqa: F811
    torch.manual_seed(rows + 3)
    k = 256
    pw, deq = packed("fp4_e2m1", torch.randn(6, k))
    pw.scale[2, 1] = 0xFF  # NaN block scale
    deq = deq.clone()
    deq[2, 32:64] = float("nan")
    x = torch.randn(rows, k)
    x[0, 5] = float("inf")
    y = packed_linear(x.bfloat16(), pw)
    ref = F.linear(x.bfloat16().double(), deq.double())
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    assert torch.equal(torch.isinf(y), torch.isinf(ref))


def test_avx512_value_turns_the_bf16_kernel_off():
    """GROUPQUANT_CPU_PATH / cpu_path: avx512_bf16 sits above avx512 where the host has BF16."""
    have = cpu.available_cpu_paths()
    if not have:
        pytest.skip("native kernels not in use")
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags")
    assert ("avx512_bf16" in have) == ("avx512" in have and "avx512_bf16" in flags)
    if "avx512_bf16" in have:
        assert have[0] == "avx512_bf16"
        with cpu.cpu_path("avx512"):
            assert cpu.active_cpu_path() == "avx512"
        with cpu.cpu_path("auto"):
            assert cpu.active_cpu_path() == "avx512_bf16"
