"""The AVX-512 streaming kernels' own code paths (csrc/packed_gemm_stream_avx512.cpp,
csrc/packed_gemm_stream_avx512_bf16.cpp), beyond what the every-path tests reach: the float32
kernel's two decodes (bfloat16 words where the 16 table values are exact in bfloat16, float32
dwords for any other table), and the bfloat16 kernel's input rows that are used as they are
(magnitudes in [2^-100, 2^64)) beside rows it scales by a power of two first, in one call and one
register tile. Outputs against a float64 composition of the reference decode, per element."""
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
