"""Inference from packed weights: PackedLinear (groupquant.pack_model) vs float32 nn.Linear vs
PyTorch's int4 weight-only CPU kernel, on a 4096 x 4096 layer, 2 threads, in one run.

Run by hand (from the repository root):

    PYTHONPATH=src python benchmarks/bench_packed.py                 # the README table
    PYTHONPATH=src python benchmarks/bench_packed.py --size 1024 --rounds 3

For every format (MXFP4, MXFP6 E2M3, MXFP8 E4M3 / E5M2, MXINT8, NVFP4; weight-only: no input quantizer)
and batch 1, 8, 64 it prints the best time (ms) over --rounds rounds of --reps calls of

- ``packed``: the PackedLinear of a QuantLinear with that weight quantizer (float32 input);
- ``fp32``: ``nn.Linear`` (float32, same shape, bias);
- ``int4``: ``torch.ops.aten._weight_int4pack_mm_for_cpu`` (int4 weights in groups of 32 with
  bfloat16 scales and zero points, bfloat16 activations), PyTorch's own weight-only kernel;

and the ratios ``fp32 / packed`` (speed-up over float32) and ``int4 / packed``. The three are
timed in turn inside every round (the machine may be shared: all see the same load), and the best
round counts. Also: the packed layer's state bytes over float32's, and the largest output error
relative to ``F.linear(x, dequantized W, b)`` (float64 reference).
"""
from __future__ import annotations

import argparse
import time
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.nn import QuantLinear
from groupquant.quantizers import (NVFP4Weight, MXFloat4e2m1Weight, MXFloat6e2m3Weight, MXFloat8e4m3Weight, MXFloat8e5m2Weight,
                                   MXInt8Weight)

FORMATS = {"MXFP4": MXFloat4e2m1Weight, "MXFP6 e2m3": MXFloat6e2m3Weight, "MXFP8 e4m3": MXFloat8e4m3Weight,
           "MXFP8 e5m2": MXFloat8e5m2Weight, "MXINT8": MXInt8Weight, "NVFP4": NVFP4Weight}
BATCHES = (1, 8, 64)
INT4_GROUP = 32


def best_ms(fn: Callable[[], object], reps: int) -> float:
    """Best wall time of fn() over reps calls, in milliseconds."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def int4_runner(weight: torch.Tensor, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """PyTorch's int4 weight-only CPU GEMM on a 4-bit asymmetric quantization of ``weight``."""
    n, k = weight.shape
    w = weight.view(n, k // INT4_GROUP, INT4_GROUP)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp_min(1e-8)
    q = ((w - lo) / scale).round().clamp(0, 15).to(torch.int32).view(n, k)
    zero = lo + 8 * scale  # the kernel computes (q - 8) * scale + zero
    scales_zeros = torch.stack([scale.view(n, -1).t(), zero.view(n, -1).t()], dim=-1).to(torch.bfloat16).contiguous()
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    xb = x.to(torch.bfloat16)
    return lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(xb, packed, INT4_GROUP, scales_zeros)


def state_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def run(size: int, rounds: int, reps: int, formats: List[str]) -> None:
    torch.manual_seed(0)
    dense = nn.Linear(size, size)
    rows = []
    for name in formats:
        layer = QuantLinear(size, size, weight_quant=FORMATS[name])
        with torch.no_grad():
            layer.weight.copy_(dense.weight)
            layer.bias.copy_(dense.bias)
        packed = gq.pack_model(layer.eval())
        w_deq = packed.dequantized_weight().double()
        for batch in BATCHES:
            x = torch.randn(batch, size)
            with torch.no_grad():
                ref = F.linear(x.double(), w_deq, dense.bias.double())
                err = float((packed(x).double() - ref).abs().max() / ref.abs().max())
                runs: Dict[str, Callable[[], object]] = {"packed": lambda: packed(x), "fp32": lambda: dense(x),
                                                         "int4": int4_runner(dense.weight, x)}
                for fn in runs.values():
                    fn()  # warm-up
                best = {k: float("inf") for k in runs}
                for _ in range(rounds):
                    for key, fn in runs.items():
                        best[key] = min(best[key], best_ms(fn, reps))
            rows.append((name, batch, best, err, state_bytes(packed) / state_bytes(dense)))
    print(f"{size} x {size} linear, {torch.get_num_threads()} threads, best of {rounds} x {reps} calls "
          f"(torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()})\n")
    print("| format | batch | packed ms | fp32 ms | fp32 / packed | int4 ms | int4 / packed | state / fp32 | max rel err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, batch, best, err, mem in rows:
        print(f"| {name} | {batch} | {best['packed']:.3f} | {best['fp32']:.3f} | {best['fp32'] / best['packed']:.2f}x | "
              f"{best['int4']:.3f} | {best['int4'] / best['packed']:.2f}x | {mem:.3f} | {err:.1e} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--formats", nargs="*", default=list(FORMATS), choices=list(FORMATS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run(args.size, args.rounds, args.reps, args.formats)


if __name__ == "__main__":
    main()
