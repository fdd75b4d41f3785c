"""The packed GEMM's CPU kernel selection table and worker rule (csrc/packed_gemm_select.cpp,
csrc/packed_gemm_worker_rule.cpp).

- The table the extension walks (op ``packed_cpu_kernel_table``) is the one docs/packed-inference.md
  prints, row for row.
- Calls on the paths this host has take the kernel its rows name (``packed_cpu_last_kernel``), and
  on an AVX-512 BF16 host a bfloat16 input the kernel refuses goes to the row's ``refused`` kernel.
- The worker rule (op ``packed_worker_rule``) on hand-made numbers at each rule's boundaries.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from groupquant.ops import native
from groupquant.ops import packed_gemm_cpu_path as cpu
from groupquant.ops.packed_gemm import packed_linear

from test_packed_gemm_cpu_path import packed

DOCS = Path(__file__).resolve().parents[2] / "docs" / "packed-inference.md"
MIB = 1 << 20  # multiply-adds per thread of the size rule (kMultiplyAddsPerThread)


@pytest.fixture(autouse=True)
def _need_native():
    if not native.native_available(torch.device("cpu")):
        pytest.skip("native kernels not in use (GROUPQUANT_BACKEND=reference or no compiler)")


def _kernel() -> str:
    return str(torch.ops.groupquant.packed_cpu_last_kernel())


def _need(path: str) -> None:
    if path not in cpu.available_cpu_paths():
        pytest.skip(f"this host has no {path} path (it has {', '.join(cpu.available_cpu_paths())})")


def test_table_is_the_one_in_the_docs():
    """Every row of the extension's table, in order, is the docs' "Kernel selection" table."""
    rows = str(torch.ops.groupquant.packed_cpu_kernel_table()).strip().splitlines()
    text = DOCS.read_text()
    section = text[text.index("### Kernel selection"):text.index("**What is exact.**")]
    doc_rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| rows")]
    assert len(rows) == 7 and rows == doc_rows
    assert rows[-1].startswith("| any | scalar | any | any | - | `few_rows`")  # the last row takes every call


def test_every_table_kernel_has_a_tuning_key_or_none_needed():
    """The tuning table is keyed by the table's kernel names (or ``workers``)."""
    kernels = set(re.findall(r"`([a-z0-9_]+)`", str(torch.ops.groupquant.packed_cpu_kernel_table())))
    text = DOCS.read_text()
    section = text[text.index("### Tuning figures"):text.index("### Speed")]
    keys = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            keys.update(re.findall(r"`([a-z0-9_]+)`", line.split("|")[1]))
    assert keys and keys <= kernels | {"workers"}


@pytest.mark.parametrize("rows,block,k,path,want", [
    (16, 32, 256, "avx2", "many_rows"),     # 16 rows: many, on any path
    (16, 32, 256, "scalar", "many_rows"),
    (3, 32, 256, "avx2", "avx2"),           # blocks of 32: the AVX2 streaming kernel
    (3, 8, 256, "avx2", "few_rows"),        # blocks of 8: stream_avx2_applies does not hold
    (3, 32, 256, "scalar", "few_rows"),     # the scalar path: the last row
    (1, 16, 208, "avx2", "few_rows"),       # 13 blocks of 16: not whole pairs
    (1, 16, 256, "avx2", "avx2"),           # 16 blocks of 16: pairs
])
def test_float32_calls_take_the_table_kernel(rows, block, k, path, want):
    _need(path)
    torch.manual_seed(rows + block + k)
    pw, deq = packed("fp4_e2m1" if block != 16 else "nvfp4", torch.randn(24, k), block)
    x = torch.randn(rows, k)
    with cpu.cpu_path(path):
        y = packed_linear(x, pw)
        assert _kernel() == want
    ref = x.double() @ deq.double().t()
    assert float((y.double() - ref).abs().max()) <= 1e-5 * float((x.double().abs() @ deq.double().abs().t()).max())


@pytest.mark.parametrize("name,fast,refused", [("fp4_e2m1", "avx512_bf16", "avx512"),
                                               ("fp8_e4m3", "avx512_8bit_bf16", "avx512_8bit")])
def test_refused_bfloat16_input_takes_the_refused_kernel(name, fast, refused):
    """A bfloat16 row spanning 2^-120 .. 1 is refused by the bfloat16 kernel (its 2^100 rule) and runs
    on the row's `refused` kernel; a plain row runs on the bfloat16 kernel."""
    _need("avx512_bf16")
    torch.manual_seed(0)
    pw, _ = packed(name, torch.randn(64, 256), 32)
    x = torch.randn(2, 256).bfloat16()
    with cpu.cpu_path("avx512_bf16"):
        packed_linear(x, pw)
        if _kernel() != fast:
            pytest.skip(f"{fast} does not take {name} on this host (it took {_kernel()}: no AVX-512 VBMI?)")
        x[1, 3] = 2.0 ** -120
        packed_linear(x, pw)
        assert _kernel() == refused


def rule(madds=4 * MIB, torch_threads=2, nested=0, tasks=8, others=None, holding=0, wait=None) -> int:
    """The op's 15 signals; others: (gap, others, helpers, last_job, last_job_caller) ns, wait: (window, waited, others) ns."""
    o = [1, *others] if others is not None else [0, 0, 0, 0, 0, 0]
    w = [1, *wait] if wait is not None else [0, 0, 0, 0]
    return int(torch.ops.groupquant.packed_worker_rule([madds, torch_threads, nested, tasks, *o, holding, *w]))


def test_worker_rule_size():
    """Rule 1: one thread per 2^20 multiply-adds, at most torch's threads, 1 when nested; rule 2: one task."""
    assert rule() == 2
    assert rule(madds=MIB - 1) == 1
    assert rule(madds=2 * MIB - 1) == 1 and rule(madds=2 * MIB) == 2
    assert rule(madds=3 * MIB, torch_threads=8) == 3
    assert rule(madds=100 * MIB, torch_threads=8) == 8
    assert rule(torch_threads=1) == 1
    assert rule(nested=1) == 1
    assert rule(tasks=1) == 1 and rule(tasks=2) == 2


def test_worker_rule_other_threads():
    """Rule 3 at its boundaries: others > 1/4 of the gap, others + helpers > 3/4, caller >= 80% of its job."""
    busy = (1000, 300, 500, 100, 80)
    assert rule(others=busy) == 1
    assert rule(others=(1000, 250, 600, 100, 80)) == 2   # others exactly a quarter
    assert rule(others=(1000, 300, 450, 100, 80)) == 2   # with the helpers exactly 3/4
    assert rule(others=(1000, 300, 451, 100, 80)) == 1
    assert rule(others=(1000, 300, 500, 100, 79)) == 2   # the caller lacked its core: helpers kept
    assert rule(others=busy, madds=MIB) == 1             # one thread anyway


def test_worker_rule_threads_short_of_cores():
    """Rule 4: waited > 1/3 of the window while the others ran < 1/20 of it; a hold is on."""
    assert rule(wait=(3000, 1001, 149)) == 1
    assert rule(wait=(3000, 1000, 149)) == 2   # exactly a third
    assert rule(wait=(3000, 1001, 150)) == 2   # the others were not quiet
    assert rule(holding=1) == 1
    assert rule(holding=1, torch_threads=1) == 1
    assert rule(wait=(3000, 0, 0), others=(1000, 0, 0, 100, 100)) == 2


def test_worker_rule_checks_its_signal_count():
    with pytest.raises(ValueError, match="15 signals"):
        torch.ops.groupquant.packed_worker_rule([1, 2, 3])
