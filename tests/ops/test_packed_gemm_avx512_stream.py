"""The AVX-512 streaming kernels' own code paths (csrc/packed_gemm_stream_avx512.cpp,
csrc/packed_gemm_stream_avx512_bf16.cpp), beyond what the every-path tests reach: the float32
kernel's two decodes (bfloat16 words where the 16 table values are exact in bfloat16, float32
dwords for any other table), and the bfloat16 kernel's input rows that are used as they are
(magnitudes in [2^-100, 2^64)) beside rows it scales by a power of two first, in one call and one
register tile; rows that end in a half run of 64 codes (K a multiple of 64, not of 128: SmolLM2's 576)
on both kernels, and which kernel a call took (groupquant::packed_cpu_last_kernel). Outputs against a
float64 composition of the reference decode, per element."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from groupquant.ops import packed_gemm_cpu_path as cpu
from groupquant.ops.packed_gemm import PackedWeight, packed_linear, reference_packed_decode

from test_packed_gemm_bf16 import check
from test_packed_gemm_cpu_path import packed

DECODE_TABLE16 = 1  # csrc/packed_gemm.h DecodePath::kDecodeTable16: 4-bit codes through the table


def _need(path: str) -> None:
    if path not in cpu.available_cpu_paths():
        pytest.skip(f"this host has no {path} path (it has {', '.join(cpu.available_cpu_paths()) or 'none'})")


def _within_float32_gemm_error(y: torch.Tensor, x: torch.Tensor, deq: torch.Tensor) -> bool:
    ref = F.linear(x.double(), deq.double())
    bound = 1e-5 * F.linear(x.double().abs(), deq.double().abs()) + 1e-30
    return bool(((y.double() - ref).abs() <= bound).all())


@pytest.mark.parametrize("rows", [1, 2, 8, 9])
@pytest.mark.parametrize("name,k", [("fp4_e2m1", 256), ("nvfp4", 384)])
def test_float32_kernel_with_a_table_not_exact_in_bf16(name, k, rows):
    """A 16-entry table whose values need more than bfloat16's 8 bits takes the dwords decode; the
    same codes with the format's own table (exact in bfloat16) the words decode: both right."""
    _need("avx512")
    torch.manual_seed(rows + k)
    pw, deq = packed(name, torch.randn(70, k) * torch.logspace(-3, 3, k, base=2.0))
    odd = pw.value_table * (1.0 + 2.0 ** -12)  # e.g. 1.5 -> 1.5 + 1.5 * 2^-12: not a bfloat16
    assert bool((odd.view(torch.int32) & 0xFFFF != 0).any())
    pw_odd = PackedWeight(pw.data, pw.scale, odd, pw.scale_table,
                          dataclasses.replace(pw.params, decode_path=DECODE_TABLE16))
    deq_odd = reference_packed_decode(pw_odd)
    x = torch.randn(rows, k)
    with cpu.cpu_path("avx512"):
        assert _within_float32_gemm_error(packed_linear(x, pw), x, deq)
        y_odd = packed_linear(x, pw_odd)
    assert _within_float32_gemm_error(y_odd, x, deq_odd)
    # and not merely close to the exact table's result: the 2^-12 shows in the outputs
    assert not torch.equal(y_odd, packed_linear(x, pw))


@pytest.mark.parametrize("rows", [1, 3, 8, 9])
def test_bf16_kernel_rows_used_as_they_are_and_scaled_rows_in_one_call(rows):
    """Rows within [2^-100, 2^64) go to the dot products unscaled; a row at 2^70 or with a value at
    2^-105 is scaled by a power of two and its sums scaled back: mixed in one tile (and, with 9
    rows, a one-row tile after a full one), every row within the float32 contract."""
    _need("avx512_bf16")
    torch.manual_seed(rows)
    k = 256
    pw, deq = packed("fp4_e2m1", torch.randn(40, k))
    b = torch.zeros(40)
    x = torch.randn(rows, k)
    x[rows - 1] *= 2.0 ** 70  # the last row (alone in its tile when rows = 9): scaled down
    if rows >= 3:
        x[1] *= 2.0 ** -90
        x[1, 3] = 2.0 ** -105  # below 2^-100: the row is scaled up
    if rows >= 4:
        x[2] *= 2.0 ** 60  # below 2^64: used as it is
    with cpu.cpu_path("avx512_bf16"):
        check(x.bfloat16(), pw, deq, b)


# K a multiple of 64 but not of 128 ends every weight row in a half run (the last 32 bytes, loaded
# under a mask; the permuted input padded with zeros; the padding lanes' block scales 1.0). SmolLM2's
# 576-wide projections are such. 570 and 1590: K not a multiple of the block, padded to 576 / 1600.
HALF_RUN_KS = [64, 192, 576, 1600, 570, 1590]


def _weight(name: str, k: int, n: int = 40, nan_last_block_row: int | None = None):
    """(PackedWeight, reference decode) of a random (n, k) weight over many binades; with
    nan_last_block_row, that row's last scale byte set to the scale format's NaN (in the half run)."""
    pw, _ = packed(name, torch.randn(n, k) * torch.logspace(-4, 4, k, base=2.0))
    if nan_last_block_row is not None:
        scale = pw.scale.clone()
        scale[nan_last_block_row, -1] = 0xFF if name == "fp4_e2m1" else 0x7F  # E8M0 / positive E4M3 NaN
        pw = PackedWeight(pw.data, scale, pw.value_table, pw.scale_table, pw.params)
    return pw, reference_packed_decode(pw)[:, :k]


def _check_float32(y: torch.Tensor, x: torch.Tensor, deq: torch.Tensor) -> None:
    """NaN exactly where the float64 reference has it; every other element within float32 GEMM error."""
    ref = F.linear(x.double(), deq.double())
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), "NaN positions differ"
    fin = ~torch.isnan(ref)
    bound = 1e-5 * F.linear(x.double().abs(), deq.double().abs()) + 1e-30
    assert bool(((y.double() - ref).abs()[fin] <= bound[fin]).all())


@pytest.mark.parametrize("rows", [1, 2, 8, 9])
@pytest.mark.parametrize("k", HALF_RUN_KS)
@pytest.mark.parametrize("name", ["fp4_e2m1", "nvfp4"])
def test_half_run_rows_float32_kernel(name, k, rows):
    """K a multiple of 64 (after padding to the block): within float32 GEMM error of the reference,
    and a NaN scale byte of the half run's (real) last block gives NaN in that output row only."""
    _need("avx512")
    torch.manual_seed(rows * 1000 + k)
    pw, deq = _weight(name, k, nan_last_block_row=3)
    x = torch.randn(rows, k)
    with cpu.cpu_path("avx512"):
        y = packed_linear(x, pw)
    _check_float32(y, x, deq)
    assert bool(torch.isnan(y[:, 3]).all()) and not bool(torch.isnan(y[:, :3]).any())


@pytest.mark.parametrize("rows", [1, 2, 8, 9])
@pytest.mark.parametrize("k", HALF_RUN_KS)
@pytest.mark.parametrize("name", ["fp4_e2m1", "nvfp4"])
def test_half_run_rows_bf16_kernel(name, k, rows):
    """The same on the vdpbf16ps kernel, bfloat16 input (its float32 contract plus one bfloat16
    rounding, test_packed_gemm_bf16.check), a NaN tail scale included."""
    _need("avx512_bf16")
    torch.manual_seed(rows * 1000 + k + 1)
    pw, deq = _weight(name, k, nan_last_block_row=5)
    x = torch.randn(rows, k).bfloat16()
    with cpu.cpu_path("avx512_bf16"):
        y = check(x, pw, deq, torch.zeros(deq.shape[0]))
    assert bool(torch.isnan(y[:, 5]).all()) and not bool(torch.isnan(y[:, :5]).any())


def _last_kernel() -> str:
    """The CPU kernel that ran this thread's last packed_linear (csrc/packed_gemm_cpu.cpp)."""
    return str(torch.ops.groupquant.packed_cpu_last_kernel())


@pytest.mark.parametrize("k", [576, 1536, 570])
@pytest.mark.parametrize("name", ["fp4_e2m1", "nvfp4"])
def test_smollm2_widths_take_the_avx512_kernels(name, k):
    """SmolLM2-135M's K = 576 (and 1536; 570 padded to 576) runs the AVX-512 kernels, not the AVX2
    one: the kernel query says so, and the float32 result's bits differ from the avx2 path's (each
    kernel sums in its own float32 order; 512 outputs of 576 terms differ somewhere)."""
    _need("avx512_bf16")
    torch.manual_seed(k)
    pw, deq = _weight(name, k, n=512)
    x = torch.randn(1, k)
    with cpu.cpu_path("avx2"):
        y2 = packed_linear(x, pw)
        assert _last_kernel() == "avx2"
    with cpu.cpu_path("avx512"):
        y512 = packed_linear(x, pw)
        assert _last_kernel() == "avx512"
    with cpu.cpu_path("avx512_bf16"):
        check(x.bfloat16(), pw, deq, torch.zeros(512))
        assert _last_kernel() == "avx512_bf16"
    assert not torch.equal(y512, y2)


def test_half_run_needs_a_finite_table0():
    """A half run reads its padding lanes as code 0: with table[0] NaN the float32 kernel does not
    take K = 576 (a NaN there would poison every row), it does take K = 512, and both are right."""
    _need("avx512")
    torch.manual_seed(0)
    for k, want in [(576, "avx2"), (512, "avx512")]:
        pw, _ = packed("fp4_e2m1", torch.randn(40, k))
        table = pw.value_table.clone()
        table[0] = float("nan")
        pw_nan = PackedWeight(pw.data, pw.scale, table, pw.scale_table,
                              dataclasses.replace(pw.params, decode_path=DECODE_TABLE16))
        x = torch.randn(1, k)
        with cpu.cpu_path("avx512"):
            y = packed_linear(x, pw_nan)
            assert _last_kernel() == want
        _check_float32(y, x, reference_packed_decode(pw_nan))


@pytest.mark.parametrize("path_name", ["avx512", "avx512_bf16"])
@pytest.mark.parametrize("rows", [1, 9])
def test_half_run_any_thread_count_same_bits(path_name, rows):
    """6144 x 576 (3.5 M multiply-adds a row: three threads' worth): bit for bit the same for 1, 2
    and 3 threads on either kernel."""
    _need(path_name)
    torch.manual_seed(rows)
    pw, _ = _weight("fp4_e2m1", 576, n=6144)
    x = torch.randn(rows, 576)
    if path_name == "avx512_bf16":
        x = x.bfloat16()
    before = torch.get_num_threads()
    outs = []
    try:
        with cpu.cpu_path(path_name):
            for threads in (1, 2, 3):
                torch.set_num_threads(threads)
                outs.append(packed_linear(x, pw))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(outs[0].view(torch.int16 if x.dtype == torch.bfloat16 else torch.int32),
                           o.view(torch.int16 if x.dtype == torch.bfloat16 else torch.int32)) for o in outs[1:])


@pytest.mark.parametrize("rows", [4, 5, 8])
@pytest.mark.parametrize("k", [256, 576])
@pytest.mark.parametrize("name", ["fp4_e2m1", "nvfp4"])
def test_float32_kernel_weight_rows_in_pairs_with_an_odd_last_row(name, k, rows):
    """4 to 8 input rows take the weight rows in pairs: 67 rows (a task of 64, then 3: a pair and
    one alone) stay within float32 GEMM error, and a NaN scale byte in the odd last row's last block
    (or in a pair's second row) gives NaN in that output column only."""
    _need("avx512")
    torch.manual_seed(rows * 100 + k)
    pw, deq = _weight(name, k, n=67, nan_last_block_row=66)
    scale = pw.scale.clone()
    scale[65, 0] = scale[66, -1]  # the NaN byte once more, in the first block of row 65 (a pair's second)
    pw = PackedWeight(pw.data, scale, pw.value_table, pw.scale_table, pw.params)
    deq = reference_packed_decode(pw)[:, :k]
    x = torch.randn(rows, k) * torch.logspace(-3, 3, k, base=2.0)
    with cpu.cpu_path("avx512"):
        y = packed_linear(x, pw)
    _check_float32(y, x, deq)
    assert bool(torch.isnan(y[:, 65:]).all()) and not bool(torch.isnan(y[:, :65]).any())
