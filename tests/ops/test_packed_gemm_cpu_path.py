"""Every CPU path of the packed GEMM (ops/packed_gemm_cpu_path.py, csrc/packed_gemm_cpu_path.h,
csrc/packed_gemm_stream*.cpp): the decoded weight bit for bit the reference decode and the
fake-quant weight, linear outputs within float32 GEMM error of a float64 composition, NaN
propagation, on each path the host has (the others skip, saying why); GROUPQUANT_CPU_PATH
checking; and the work-claiming threads (packed_gemm_workers.h): outputs bit for bit the same for
any thread count and from concurrent callers."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import groupquant as gq
from groupquant.formats import E8M0, IntFormat
from groupquant.ops import native
from groupquant.ops import packed_gemm_cpu_path as cpu
from groupquant.ops.packed_gemm import PackedWeight, packed_decode, packed_linear, reference_packed_decode
from groupquant.ops.packed_gemm_params import packed_gemm_params
from groupquant.ops.packed_tables import element_value_table, scale_table

PATHS = ("avx512_bf16", "avx512", "avx2", "scalar")
INT4 = IntFormat(name="int4_mx", bit_width=4, signed=True, narrow_range=True, frac_bits=2)
SRC = Path(__file__).resolve().parents[2] / "src"


def _native() -> bool:
    return native.native_available(torch.device("cpu"))


@pytest.fixture(params=PATHS)
def path(request):
    """Runs the test on one CPU path; skips (with the reason) where the host or build lacks it."""
    if not _native():
        pytest.skip("native kernels not in use (GROUPQUANT_BACKEND=reference or no compiler)")
    if request.param not in cpu.available_cpu_paths():
        pytest.skip(f"this host has no {request.param} path (it has {', '.join(cpu.available_cpu_paths())})")
    with cpu.cpu_path(request.param):
        assert cpu.active_cpu_path() == request.param
        yield request.param


def packed(fmt, w: torch.Tensor, block: int = 32):
    """(PackedWeight, dequantized float32 weight) of ``w`` quantized to ``fmt`` (E8M0 or NVFP4)."""
    p = gq.pack(gq.quantize(w, fmt, block_size=block) if fmt != "nvfp4" else gq.quantize(w, fmt))
    n = w.shape[0]
    nv = p.tensor_scale is not None
    params = packed_gemm_params(p.fmt, n, w.shape[1], p.block_size, global_scale=float(p.tensor_scale) if nv else 1.0,
                                has_global_scale=nv)
    pw = PackedWeight(p.data.reshape(-1).view(torch.uint8), p.scale.view(torch.uint8).reshape(n, -1),
                      element_value_table(p.fmt), scale_table(p.scale_format if nv else E8M0), params)
    return pw, p.dequantize().float()


def same_bits(a, b):
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan].view(torch.int32), b[~nan].view(torch.int32))


def rel_err(y, ref):
    return float((y.double() - ref).norm() / ref.norm().clamp_min(1e-300))


# K = 256, 384: whole runs of 128 (the AVX-512 4-bit kernel); 100: padded to 128; 200: not a multiple of 128
CASES = [("fp4_e2m1", 32, 256), ("fp4_e2m1", 32, 100), ("fp4_e2m1", 64, 384), ("fp4_e2m1", 128, 256),
         ("fp4_e2m1", 256, 512), ("fp4_e2m1", 16, 200), ("fp4_e2m1", 8, 128), ("nvfp4", 16, 256), ("nvfp4", 16, 208),
         ("int4", 32, 256), ("fp8_e4m3", 32, 256), ("int8", 32, 128), ("fp6_e3m2", 32, 128), ("fp8_e5m2", 16, 96)]


@pytest.mark.parametrize("name,block,k", CASES)
def test_decode_bit_for_bit_on_every_path(path, name, block, k):
    torch.manual_seed(k + block)
    w = torch.randn(37, k) * torch.logspace(-3, 3, k)
    pw, deq = packed(INT4 if name == "int4" else name, w, block)
    assert same_bits(packed_decode(pw), deq)
    assert same_bits(reference_packed_decode(pw), deq)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 9, 13, 16])
@pytest.mark.parametrize("name,block,k", CASES)
def test_linear_within_float32_gemm_error_on_every_path(path, name, block, k, rows):
    torch.manual_seed(rows * 1000 + k)
    w = torch.randn(70, k) * torch.logspace(-4, 4, k, base=2.0)  # block scales differ along the row
    b = torch.randn(70)
    pw, deq = packed(INT4 if name == "int4" else name, w, block)
    x = torch.randn(rows, k)
    ref = F.linear(x.double(), deq.double(), b.double())
    y = packed_linear(x, pw, b)
    assert y.dtype == torch.float32 and y.shape == (rows, 70)
    assert rel_err(y, ref) < 1e-5
    # each output element, not only the norm: float32 summation error of |x| |w|
    bound = 1e-5 * (F.linear(x.double().abs(), deq.double().abs()) + b.double().abs()) + 1e-30
    assert bool(((y.double() - ref).abs() <= bound).all())


@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("name,k", [("fp4_e2m1", 256), ("fp4_e2m1", 96), ("fp8_e4m3", 256), ("int8", 128)])
def test_nan_scale_on_every_path(path, name, k, rows):
    torch.manual_seed(0)
    pw, _ = packed(name, torch.randn(6, k))
    pw.scale[2, 1] = 0xFF
    y = packed_linear(torch.randn(rows, k), pw)
    assert torch.isnan(y[:, 2]).all() and not torch.isnan(y[:, [0, 1, 3, 4, 5]]).any()


def test_paths_agree_on_the_decoded_weight_and_within_gemm_error():
    """The host's paths side by side on one 4096-wide MXFP4 and NVFP4 layer (the decode shapes)."""
    if not _native():
        pytest.skip("native kernels not in use")
    torch.manual_seed(3)
    for name in ("fp4_e2m1", "nvfp4"):
        pw, deq = packed(name, torch.randn(64, 4096))
        x = torch.randn(1, 4096)
        ref = F.linear(x.double(), deq.double())
        for p in cpu.available_cpu_paths():
            with cpu.cpu_path(p):
                assert same_bits(packed_decode(pw), deq), p
                assert rel_err(packed_linear(x, pw), ref) < 1e-5, p


def test_env_value_is_checked(monkeypatch):
    monkeypatch.setenv(cpu.CPU_PATH_ENV, "avx9000")
    with pytest.raises(cpu.CpuPathSettingError, match="GROUPQUANT_CPU_PATH must be one of auto, avx512_bf16, avx512, avx2, scalar"):
        cpu.requested_cpu_path()
    monkeypatch.setenv(cpu.CPU_PATH_ENV, " AVX2 ")
    assert cpu.requested_cpu_path() == "avx2"
    monkeypatch.delenv(cpu.CPU_PATH_ENV)
    assert cpu.requested_cpu_path() == "auto"
    with pytest.raises(ValueError, match="CPU path must be one of"):
        cpu.set_cpu_path("sse")


def test_paths_follow_the_host_flags():
    """The paths offered are the host's (from /proc/cpuinfo where there is one), best first, scalar always."""
    if not _native():
        pytest.skip("native kernels not in use")
    have = cpu.available_cpu_paths()
    assert have[-1] == "scalar" and list(have) == sorted(have, key=PATHS.index)
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags")
    assert ("avx2" in have) == ("avx2" in flags and "fma" in flags)
    assert ("avx512" in have) == all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


def test_env_forces_the_path_in_a_fresh_process():
    if not _native():
        pytest.skip("native kernels not in use")
    code = ("from groupquant.ops import packed_gemm_cpu_path as c; print(c.active_cpu_path())")
    env = dict(os.environ, PYTHONPATH=str(SRC), GROUPQUANT_CPU_PATH="scalar", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "scalar"


@pytest.mark.parametrize("name,rows", [("fp4_e2m1", 1), ("nvfp4", 3), ("fp8_e4m3", 1), ("fp6_e2m3", 2), ("int8", 5)])
def test_any_thread_count_gives_the_same_bits(name, rows):
    """Rows are claimed dynamically but each output is computed by one thread in one order: the
    result is bit for bit the same for 1, 2 and 3 threads. (A call takes one thread per 2**20
    multiply-adds, kMultiplyAddsPerThread: 3072 x 1024 weights give every thread count work.)"""
    torch.manual_seed(rows)
    pw, _ = packed(name, torch.randn(3072, 1024))
    x = torch.randn(rows, 1024)
    before = torch.get_num_threads()
    try:
        outs = []
        for t in (1, 2, 3):
            torch.set_num_threads(t)
            outs.append(packed_linear(x, pw))
            outs.append(packed_decode(pw))
    finally:
        torch.set_num_threads(before)
    assert all(same_bits(outs[i], outs[i % 2]) for i in range(2, len(outs)))


def test_concurrent_callers_get_their_own_results():
    """Two Python threads calling at once (one runs its job alone while the other holds the helpers)."""
    torch.manual_seed(5)
    pws = [packed("fp4_e2m1", torch.randn(2048, 1024))[0] for _ in range(2)]  # 2 threads' worth each
    xs = [torch.randn(1, 1024) for _ in range(2)]
    want = [packed_linear(x, pw) for x, pw in zip(xs, pws)]
    bad = []

    def work(i):
        for _ in range(30):
            if not same_bits(packed_linear(xs[i], pws[i]), want[i]):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
