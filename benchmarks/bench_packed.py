"""Packed inference the way a model's decode meets it: several different layers whose packed bytes
exceed the last-level cache, called in turn, against the streaming floor of the same bytes.

Run by hand (from the repository root):

    PYTHONPATH=src python benchmarks/bench_packed.py                       # the docs table (4096, 16 layers)
    PYTHONPATH=src python benchmarks/bench_packed.py --formats MXFP4 --threads 1 --batches 1 --rounds 3
    PYTHONPATH=src python benchmarks/bench_packed.py --shared-core          # + the shared-core rows (taskset)
    PYTHONPATH=src python benchmarks/bench_packed.py --lead-in              # steady state of each kernel
    GROUPQUANT_CPU_PATH=avx2 PYTHONPATH=src python benchmarks/bench_packed.py   # force one kernel path

For every format (MXFP4, NVFP4, MXFP8 E4M3, MXINT8 by default; weight-only: no input quantizer),
every thread count (``--threads``, default 1 and 2) and batch (``--batches``, default 1 and 8), it
builds ``--layers`` different ``--size`` x ``--size`` layers and times one *cycle* (each layer
called once, in turn: no layer's bytes are still in cache when it comes round again) of

- ``floor``: one pass over each layer's packed bytes (codes and scale bytes) summed as integers by
  ``torch.sum`` -- the memory floor the kernel can at best reach (with several threads, the faster
  of that and the same on one thread, since OpenMP's sum may wait on a thread kept off its core);
- ``packed``: the layer's ``PackedLinear`` (what ``groupquant.pack_model`` makes), float32 input;
- ``packed bf16``: the same layers with the bfloat16 input (the input ``int4`` takes; on a host with
  AVX-512 BF16 the ``avx512_bf16`` path's dot-product kernel for 4-bit codes);
- ``int4``: ``torch.ops.aten._weight_int4pack_mm_for_cpu`` (int4 in groups of 32 with bfloat16
  scales and zero points, bfloat16 input), PyTorch's own weight-only kernel, on the same cycle;
- ``fp32``: ``nn.Linear`` float32 layers of the same shape (the float model), same cycle;

and prints per-layer milliseconds (median over ``--rounds`` cycles; the five are timed in turn
inside every round, so all see the same machine load; ``--lead-in`` puts one untimed cycle of the
same kernel before each timed one: the steady state of a kernel called many times in a row, without
the cost of following another kernel -- with 2 threads, torch's OpenMP threads of the kernel timed
just before keep spinning on the second core for a few milliseconds, which slows the packed
kernels' own worker), ``packed / floor``, ``int4 / packed`` (>1:
packed is faster), the same two for ``packed bf16`` and ``fp32 / packed``. ``--shared-core`` adds
rows (``--shared-formats``, default MXFP4 and NVFP4) with a busy-loop process pinned (``taskset``)
to the last CPU: 2 threads,
median and worst of ``--calls`` (40) cycles, over the 1-thread median measured just before without
it, beside the same for 1 thread with the busy loop (whose worst is the machine's own noise). The header gives the CPU model, its SIMD flags and the kernel path in use
(``GROUPQUANT_CPU_PATH``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Sequence

import torch
from torch import nn

import groupquant as gq
from groupquant.nn import QuantLinear
from groupquant.quantizers import (NVFP4Weight, MXFloat4e2m1Weight, MXFloat6e2m3Weight, MXFloat8e4m3Weight,
                                   MXFloat8e5m2Weight, MXInt8Weight)

FORMATS = {"MXFP4": MXFloat4e2m1Weight, "NVFP4": NVFP4Weight, "MXFP8 e4m3": MXFloat8e4m3Weight,
           "MXINT8": MXInt8Weight, "MXFP8 e5m2": MXFloat8e5m2Weight, "MXFP6 e2m3": MXFloat6e2m3Weight}
DEFAULT_FORMATS = ["MXFP4", "NVFP4", "MXFP8 e4m3", "MXINT8"]
INT4_GROUP = 32
SIMD_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_vnni",
              "avx512vbmi", "avx512_vbmi2", "avx_vnni", "amx_tile", "neon", "asimd", "sve")


def host_line() -> str:
    """CPU model, its SIMD flags (from /proc/cpuinfo), core count and the kernel path in use."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    simd = " ".join(f for f in SIMD_FLAGS if f in flags) or "none listed"
    try:
        from groupquant.ops import packed_gemm_cpu_path
        path = (f"{packed_gemm_cpu_path.active_cpu_path()} (available: "
                f"{', '.join(packed_gemm_cpu_path.available_cpu_paths())})")
    except ImportError:  # a checkout before runtime dispatch
        path = "n/a"
    return (f"CPU: {model}, {os.cpu_count()} logical CPUs; SIMD flags: {simd}; torch {torch.__version__} "
            f"(capability {torch.backends.cpu.get_cpu_capability()}); groupquant CPU path: {path}")


def int4_weight(weight: torch.Tensor):
    """PyTorch's int4 packing of an asymmetric 4-bit quantization of ``weight`` (groups of 32)."""
    n, k = weight.shape
    w = weight.view(n, k // INT4_GROUP, INT4_GROUP)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp_min(1e-8)
    q = ((w - lo) / scale).round().clamp(0, 15).to(torch.int32).view(n, k)
    zero = lo + 8 * scale  # the kernel computes (q - 8) * scale + zero
    scales_zeros = torch.stack([scale.view(n, -1).t(), zero.view(n, -1).t()], dim=-1).to(torch.bfloat16).contiguous()
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1), scales_zeros


_TWINS: Dict[tuple, tuple] = {}  # (size, i) -> (float layer, int4 weight): shared by the formats' cycles


def twins(size: int, i: int):
    """Layer i's float32 ``nn.Linear`` (seeded by i) and its int4 packing, made once."""
    if (size, i) not in _TWINS:
        torch.manual_seed(i)
        dense = nn.Linear(size, size)
        _TWINS[(size, i)] = (dense, int4_weight(dense.weight.detach()))
    return _TWINS[(size, i)]


class Cycle:
    """The layers of one format and their float / int4 twins, each called in turn by a cycle."""

    def __init__(self, fmt_name: str, size: int, layers: int) -> None:
        self.packed: List[nn.Module] = []
        self.dense: List[nn.Linear] = []
        self.int4 = []
        self.bytes: List[List[torch.Tensor]] = []
        for i in range(layers):
            dense, int4 = twins(size, i)
            layer = QuantLinear(size, size, weight_quant=FORMATS[fmt_name])
            with torch.no_grad():
                layer.weight.copy_(dense.weight)
                layer.bias.copy_(dense.bias)
            packed = gq.pack_model(layer.eval())
            self.packed.append(packed)
            self.dense.append(dense)
            self.int4.append(int4)
            self.bytes.append([t.view(torch.uint8).reshape(-1) for t in (packed.weight_codes, packed.weight_scale)])
        self.nbytes = sum(t.numel() for b in self.bytes for t in b) // layers
        # the floor's integer views: 8-byte words where the byte count allows, else bytes
        self.words = [[t.view(torch.int64) if t.numel() % 8 == 0 else t for t in b] for b in self.bytes]

    def runners(self, batch: int) -> Dict[str, Callable[[], object]]:
        """The five cycles at ``batch`` input rows (inputs made once)."""
        size = self.packed[0].in_features
        x = torch.randn(batch, size)
        xb = x.to(torch.bfloat16)

        def floor():
            for words in self.words:
                for t in words:
                    t.sum()

        def packed():
            for layer in self.packed:
                layer(x)

        def packed_bf16():
            for layer in self.packed:
                layer(xb)

        def int4():
            for w, sz in self.int4:
                torch.ops.aten._weight_int4pack_mm_for_cpu(xb, w, INT4_GROUP, sz)

        def fp32():
            for layer in self.dense:
                layer(x)

        return {"floor": floor, "packed": packed, "packed bf16": packed_bf16, "int4": int4, "fp32": fp32}


def cycle_times(runs: Dict[str, Callable[[], object]], rounds: int, layers: int,
                lead_in: bool = False) -> Dict[str, List[float]]:
    """Per-layer milliseconds of each cycle, ``rounds`` times, the cycles timed in turn in every round;
    ``lead_in``: each timed cycle follows one untimed cycle of the same kernel (steady state, without
    the cost of following another kernel, e.g. torch's OpenMP threads still spinning on a core)."""
    times: Dict[str, List[float]] = {k: [] for k in runs}
    for fn in runs.values():
        fn()  # warm-up
    for _ in range(rounds):
        for key, fn in runs.items():
            if lead_in:
                fn()
            t0 = time.perf_counter()
            fn()
            times[key].append((time.perf_counter() - t0) * 1e3 / layers)
    return times


class BusyCore:
    """A busy-loop process pinned to one CPU (``taskset``) for the life of the ``with`` block."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self.proc = None

    def __enter__(self) -> "BusyCore":
        self.proc = subprocess.Popen(["taskset", "-c", str(self.cpu), sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def main_table(cycles: Dict[str, Cycle], threads: Sequence[int], batches: Sequence[int], rounds: int,
               layers: int, lead_in: bool = False) -> None:
    print("| format | threads | batch | floor ms | packed ms | packed / floor | packed bf16 ms | bf16 / floor | "
          "int4 ms | int4 / packed | int4 / packed bf16 | fp32 ms | fp32 / packed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, cyc in cycles.items():
        for t in threads:
            torch.set_num_threads(t)
            for batch in batches:
                runs = cyc.runners(batch)
                med = {k: statistics.median(v) for k, v in cycle_times(runs, rounds, layers, lead_in).items()}
                if t > 1:  # a floor from fewer threads counts too (torch.sum's threads may wait on a busy core)
                    torch.set_num_threads(1)
                    med["floor"] = min(med["floor"], statistics.median(cycle_times({"floor": runs["floor"]}, rounds,
                                                                                   layers)["floor"]))
                    torch.set_num_threads(t)
                bf = med["packed bf16"]
                print(f"| {name} | {t} | {batch} | {med['floor']:.3f} | {med['packed']:.3f} | "
                      f"{med['packed'] / med['floor']:.2f}x | {bf:.3f} | {bf / med['floor']:.2f}x | "
                      f"{med['int4']:.3f} | {med['int4'] / med['packed']:.2f}x | {med['int4'] / bf:.2f}x | "
                      f"{med['fp32']:.3f} | {med['fp32'] / med['packed']:.2f}x |", flush=True)


def shared_core_table(cycles: Dict[str, Cycle], batches: Sequence[int], calls: int, layers: int) -> None:
    """2 threads beside a busy-loop process pinned to the last CPU: median and worst of ``calls``
    cycles of the packed layers (and int4, fp32), over the 1-thread median without it; and the
    1-thread median and worst of ``calls`` cycles beside the busy loop (what the 2-thread call should
    at worst come to; its worst is the machine's own noise)."""
    cpu = (os.cpu_count() or 2) - 1
    print(f"\nShared core: a busy loop pinned to CPU {cpu} (taskset); per-layer ms, 2 threads over {calls} cycles; "
          "ratios over the 1-thread median alone\n")
    print("| format | kernel | batch | 1 thread alone | 1 thread + busy core: median | worst | worst / 1t | "
          "2 threads + busy core: median | worst | median / 1t | worst / 1t |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, cyc in cycles.items():
        for batch in batches:
            runs = {k: v for k, v in cyc.runners(batch).items() if k != "floor"}
            few = max(5, calls // 4)
            torch.set_num_threads(1)
            alone = {k: statistics.median(v) for k, v in cycle_times(runs, few, layers).items()}
            with BusyCore(cpu):
                one_busy = cycle_times(runs, calls, layers)
                torch.set_num_threads(2)
                busy = cycle_times(runs, calls, layers)
            for key in runs:
                one_med, one_worst = statistics.median(one_busy[key]), max(one_busy[key])
                med, worst = statistics.median(busy[key]), max(busy[key])
                print(f"| {name} | {key} | {batch} | {alone[key]:.3f} | {one_med:.3f} | {one_worst:.3f} | "
                      f"{one_worst / alone[key]:.2f}x | {med:.3f} | {worst:.3f} | {med / alone[key]:.2f}x | "
                      f"{worst / alone[key]:.2f}x |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=16, help="different layers per cycle (default 16)")
    parser.add_argument("--rounds", type=int, default=9, help="cycles timed per kernel (median reported)")
    parser.add_argument("--lead-in", action="store_true",
                        help="main table: one untimed cycle of the same kernel before each timed one (steady state)")
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 8])
    parser.add_argument("--formats", nargs="*", default=DEFAULT_FORMATS, choices=list(FORMATS))
    parser.add_argument("--shared-core", action="store_true", help="add the busy-core rows (needs taskset)")
    parser.add_argument("--shared-only", action="store_true", help="only the busy-core rows")
    parser.add_argument("--calls", type=int, default=40, help="cycles timed for the busy-core rows")
    parser.add_argument("--shared-formats", nargs="*", default=["MXFP4", "NVFP4"], choices=list(FORMATS),
                        help="formats of the busy-core rows (default MXFP4 NVFP4)")
    args = parser.parse_args()
    print(host_line())
    torch.set_num_threads(max(args.threads))
    cycles = {name: Cycle(name, args.size, args.layers) for name in args.formats}
    for name, cyc in cycles.items():
        print(f"{name}: {args.layers} layers of {args.size} x {args.size}, {cyc.nbytes / 1e6:.1f} MB packed per layer, "
              f"{cyc.nbytes * args.layers / 1e6:.0f} MB per cycle")
    print()
    if not args.shared_only:
        main_table(cycles, args.threads, args.batches, args.rounds, args.layers, args.lead_in)
    if args.shared_core or args.shared_only:
        shared = {name: cycles[name] for name in args.shared_formats if name in cycles}
        shared_core_table(shared, args.batches, args.calls, args.layers)


if __name__ == "__main__":
    main()
