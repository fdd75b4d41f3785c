"""Small-layer overhead: QuantLinear(64, 64) with MXFP8 weight and input quantizers, batch 8,
against nn.Linear(64, 64), timed in the same run (ratios are what to compare across machines).

    PYTHONPATH=src python benchmarks/bench_layer_overhead.py [--repeat N] [--threads N]

Rows: construction; eval forward under torch.no_grad() (the quantized weight is cached until the
weight changes); training forward + backward. A second table: one call of the ops on a bfloat16
8 x 32 tensor (``fake_quant`` / ``quantize``, MXFP8 and NVFP4 with its per-tensor scale) against
``x.clone()``: what a call costs the host beside its kernel. Each figure is the median over ``--repeat`` rounds of
a timed loop, the two layers' rounds taken in turn. Denormals are flushed (torch.set_flush_denormal(True)) for the run, as in the other
benchmarks; the inputs here hold none.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable, List

import torch
from torch import nn

import groupquant as gq
from groupquant.nn import QuantLinear
from groupquant.quantizers import MXFloat8e4m3Act, MXFloat8e4m3Weight

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the benchmarks' shared helpers
from result_files import add_save_argument, saved_output  # noqa: E402


def _interleaved_us(fns: List[Callable[[], object]], loops: int, repeat: int) -> List[float]:
    """Median over ``repeat`` rounds of the mean time per call (microseconds) of each of ``fns``,
    their rounds taken in turn (round-robin), so that load from other processes falls on all of
    them alike and their ratio holds."""
    for fn in fns:
        for _ in range(max(loops // 10, 3)):
            fn()
    rounds: List[List[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, times in zip(fns, rounds):
            start = time.perf_counter()
            for _ in range(loops):
                fn()
            times.append((time.perf_counter() - start) / loops * 1e6)
    return [statistics.median(times) for times in rounds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: overhead, not GEMM speed)")
    add_save_argument(parser)
    args = parser.parse_args()
    with saved_output(args.save, __file__):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    """Time construction, eval forward and a training step of both layers, and print the table."""
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    quant = dict(weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act)
    x = torch.randn(8, 64)
    rows = []

    rows.append(("construction", *_interleaved_us([lambda: nn.Linear(64, 64), lambda: QuantLinear(64, 64, **quant)],
                                                  200, args.repeat), 5.0))

    ref, layer = nn.Linear(64, 64).eval(), QuantLinear(64, 64, **quant).eval()
    with torch.no_grad():
        rows.append(("eval forward (no_grad)", *_interleaved_us([lambda: ref(x), lambda: layer(x)], 3000, args.repeat),
                     3.0))

    ref.train()
    layer.train()
    xg = x.clone().requires_grad_(True)

    def step(module: nn.Module) -> Callable[[], None]:
        def run() -> None:
            module.zero_grad(set_to_none=True)
            module(xg).sum().backward()
        return run

    rows.append(("train forward + backward", *_interleaved_us([step(ref), step(layer)], 1000, args.repeat), 4.0))

    print(f"QuantLinear(64, 64), MXFP8 weight + input, batch 8; torch {torch.__version__}, "
          f"{args.threads} thread(s), flush denormal on")
    print(f"{'case':<26} {'nn.Linear us':>13} {'QuantLinear us':>15} {'ratio':>7} {'target':>7}")
    for name, base, ours, target in rows:
        print(f"{name:<26} {base:>13.1f} {ours:>15.1f} {ours / base:>6.2f}x {target:>6.1f}x")

    xb = torch.randn(8, 32).to(torch.bfloat16)
    calls = {"x.clone()": lambda: xb.clone(), "fake_quant MXFP8": lambda: gq.fake_quant(xb, "fp8_e4m3"),
             "quantize MXFP8": lambda: gq.quantize(xb, "fp8_e4m3"), "fake_quant NVFP4": lambda: gq.fake_quant(xb, "nvfp4"),
             "quantize NVFP4": lambda: gq.quantize(xb, "nvfp4")}
    times = _interleaved_us(list(calls.values()), 2000, args.repeat)
    print(f"\none op call, bfloat16 8 x 32 ({gq.ops.backend()} backend)")
    print(f"{'call':<26} {'us':>13} {'x clone':>15}")
    for name, us in zip(calls, times):
        print(f"{name:<26} {us:>13.1f} {us / times[0]:>14.1f}x")


if __name__ == "__main__":
    main()
