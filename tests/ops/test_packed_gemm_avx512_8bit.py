"""The AVX-512 kernels for 8-bit codes (csrc/packed_gemm_stream_avx512_8bit.cpp: MXFP8 E4M3 / E5M2,
MXINT8 and any 256-entry table exact in bfloat16), float32 input on the ``avx512`` path and
bfloat16 input on ``avx512_bf16``: outputs within float32 GEMM error of a float64 composition of
the input and the reference decode, per element, for padded K, blocks of 16 to 128, 1 to 9 input
rows, NaN / Inf codes, the NaN scale byte, NaN / Inf / subnormal inputs, rows wider than the
bfloat16 kernel's range rule (bit for bit the float32 kernel), and 1 / 2 / 3 threads bit for bit.
Paths the host lacks skip, saying why."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from groupquant.formats import IntFormat
from groupquant.ops import packed_gemm_cpu_path as cpu
from groupquant.ops.packed_gemm import packed_linear, reference_packed_decode

from test_packed_gemm_bf16 import check as check_bf16
from test_packed_gemm_cpu_path import _native, packed

UINT8 = IntFormat(name="uint8_table", bit_width=8, signed=False, frac_bits=0)  # neither sign rule: the full table
FORMATS = {"fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "int8": "int8", "uint8": UINT8}


def _host_flags() -> list:
    try:
        return next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []


@pytest.fixture(params=("avx512_bf16", "avx512"))
def path(request):
    """One AVX-512 path; skips where the host lacks it or VBMI (then 8-bit codes take the AVX2 kernel)."""
    if not _native():
        pytest.skip("native kernels not in use (GROUPQUANT_BACKEND=reference or no compiler)")
    if request.param not in cpu.available_cpu_paths():
        pytest.skip(f"this host has no {request.param} path (it has {', '.join(cpu.available_cpu_paths())})")
    if "avx512vbmi" not in _host_flags():
        pytest.skip("this host has no AVX-512 VBMI: 8-bit codes run the AVX2 kernel")
    with cpu.cpu_path(request.param):
        yield request.param


def check_f32(x: torch.Tensor, pw, deq: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float32 packed_linear against float64 F.linear of the same input and decoded weight: NaN / Inf
    where the reference has them, finite elements within 1e-5 * (|x| @ |W| + |b|)."""
    y = packed_linear(x, pw, b)
    ref = F.linear(x.double(), deq.double(), b.double())
    bound = 1e-5 * (F.linear(x.double().abs(), deq.double().abs()) + b.double().abs()) + 1e-30
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), "NaN positions differ"
    assert torch.equal(torch.isinf(y) & fin.logical_not(), torch.isinf(ref))
    assert bool(((y.double() - ref).abs()[fin] <= bound[fin]).all())
    return y


def check(x: torch.Tensor, pw, deq: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return check_bf16(x, pw, deq, b) if x.dtype == torch.bfloat16 else check_f32(x, pw, deq, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 3, 8, 9])
@pytest.mark.parametrize("block,k", [(32, 256), (32, 100), (32, 96), (16, 192), (64, 320), (128, 256)])
@pytest.mark.parametrize("name", list(FORMATS))
def test_within_float32_gemm_error(path, name, block, k, rows, dtype):
    """K = 100 is padded to 128; K = 96 (not a multiple of 64) takes the AVX2 kernel."""
    torch.manual_seed(rows * 31 + k + block)
    w = torch.randn(67, k) * torch.logspace(-6, 6, k, base=2.0)  # block scales over many binades
    if name == "uint8":
        w = w.abs()
    pw, deq = packed(FORMATS[name], w, block)
    b = torch.randn(67)
    x = (torch.randn(rows, k) * torch.logspace(-8, 8, k, base=2.0)[torch.randperm(k)]).to(dtype)
    check(x, pw, deq, b)


# codes that decode to NaN / Inf (E4M3: 0x7F, 0xFF NaN; E5M2: 0x7C, 0xFC Inf, the rest of 0x7D-0x7F NaN)
# and MXINT8's -128 (0x80, which the narrow-range quantizer never writes)
SPECIAL = {"fp8_e4m3": [0x7F, 0xFF], "fp8_e5m2": [0x7C, 0xFC, 0x7D, 0xFE], "int8": [0x80, 0x7F, 0x01]}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(SPECIAL))
def test_special_codes_scales_and_inputs(path, name, dtype):
    torch.manual_seed(5)
    n, k = 24, 256
    pw, _ = packed(name, torch.randn(n, k), 32)
    codes = pw.data.view(n, k)  # 8-bit codes: one byte each, K = padded K
    for i, c in enumerate(SPECIAL[name]):
        codes[3 * i + 1, 40 + 70 * i] = c  # one special code in rows 1, 4, 7, 10
    pw.scale[20, 3] = 0xFF  # NaN block scale
    pw.scale[21, 0] = 0x00  # the subnormal scale 2^-127
    deq = reference_packed_decode(pw)
    b = torch.zeros(n)  # (biases: test_within_float32_gemm_error) so that row 3's tiny sums show
    x = torch.randn(5, k)
    x[1, 7] = float("inf")
    x[2, 9] = float("nan")
    x[3] = torch.randn(k) * 2.0 ** -132  # subnormal activations (float32 and bfloat16)
    x[4, ::5] = 0.0
    y = check(x.to(dtype), pw, deq, b)
    assert bool((y[3] != 0).any()), "subnormal activations were flushed"
    if name == "int8":  # 0x80 decodes to -2 (times the block scale), 0x01 to 2^-6
        assert float(deq[1, 40]) == -2.0 * float(pw.scale_table[pw.scale[1, 1].long()])


@pytest.mark.parametrize("name", ["fp8_e4m3", "int8"])
def test_wide_row_runs_the_float32_kernel_bit_for_bit(path, name):
    """A bfloat16 row whose magnitudes span more than 2^100 is outside the BF16 kernel's rule: that
    call runs the float32 kernel, so avx512_bf16 and avx512 agree bit for bit."""
    if path != "avx512_bf16":
        pytest.skip("compares the avx512_bf16 path with avx512")
    torch.manual_seed(9)
    pw, deq = packed(name, torch.randn(40, 256), 32)
    x = torch.randn(3, 256)
    x[:, ::3] *= 2.0 ** -128
    xb = x.bfloat16()
    y16 = check(xb, pw, deq, torch.zeros(40))
    with cpu.cpu_path("avx512"):
        y32 = packed_linear(xb, pw)
    assert torch.equal(y16.view(torch.int16), y32.view(torch.int16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["fp8_e5m2", "int8"])
def test_thread_counts_bit_for_bit(path, name, dtype):
    """1, 2 and 3 threads (a layer of 3 * 2^20 multiply-adds: up to 3 threads) give the same bits."""
    torch.manual_seed(13)
    pw, deq = packed(name, torch.randn(1024, 1024), 32)
    x = torch.randn(3, 1024).to(dtype)
    before = torch.get_num_threads()
    try:
        outs = []
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            outs.append(packed_linear(x, pw))
    finally:
        torch.set_num_threads(before)
    check(x, pw, deq, torch.zeros(1024))
    for y in outs[1:]:
        assert torch.equal(y.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                           outs[0].view(torch.int16 if dtype == torch.bfloat16 else torch.int32))
