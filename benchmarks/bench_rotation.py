"""Cost of a layer's online block-Hadamard rotation (``InputRotation``, ``groupquant.ops.hadamard.fwht``)
in training: forward + backward of one rotation of a ``[tokens, features]`` activation, SmolLM2-135M's
widths (576: q / k / v / o / gate / up inputs; 1536: down_proj's), blocks of 32.

    PYTHONPATH=src python benchmarks/bench_rotation.py [--tokens 512] [--rounds 30] [--threads 1 2]

Rows, timed round-robin in one run (median ms per forward + backward, and the ratio to the first):
``butterfly on autograd`` is the transform as torch ops that autograd records (the form ``fwht`` had
before issue 31: five passes of stacked ``(a + c, a - c)``), ``fwht`` the library's (one autograd node:
forward passes written into two buffers, the same additions in the same order, so bit for bit the
same values; backward one ``[32, 32]`` matrix product per block),
``dense block matmul`` multiplies by the ``[32, 32]`` Hadamard matrix (a different rounding, which the
library does not use: the floor a GEMM would give).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from groupquant.ops.hadamard import fwht, hadamard_matrix  # noqa: E402
from bench_packed import host_line  # noqa: E402
from result_files import add_save_argument, saved_output  # noqa: E402

BLOCK = 32


def butterfly_on_autograd(x: torch.Tensor) -> torch.Tensor:
    """The transform as autograd-recorded torch ops (the baseline)."""
    n = x.shape[-1]
    y = x.reshape(-1, n // BLOCK, BLOCK)
    h = 1
    while h < BLOCK:
        pairs = y.reshape(y.shape[0], n // BLOCK, BLOCK // (2 * h), 2, h)
        a, c = pairs[..., 0, :], pairs[..., 1, :]
        y = torch.stack((a + c, a - c), dim=-2).reshape(y.shape)
        h *= 2
    return (y * (1.0 / math.sqrt(BLOCK))).reshape(x.shape)


def run(tokens: int, features: int, rounds: int) -> Dict[str, float]:
    """Median ms of forward + backward per variant, interleaved."""
    x = torch.randn(tokens, features)
    grad = torch.randn(tokens, features)
    h = hadamard_matrix(BLOCK, dtype=torch.float32)
    variants: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "butterfly on autograd": butterfly_on_autograd,
        "fwht": lambda t: fwht(t, BLOCK),
        "dense block matmul": lambda t: (t.reshape(-1, BLOCK) @ h).reshape(t.shape),
    }
    assert torch.equal(fwht(x, BLOCK), butterfly_on_autograd(x))
    times: Dict[str, List[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            t = x.clone().requires_grad_(True)
            start = time.perf_counter()
            fn(t).backward(grad)
            times[name].append((time.perf_counter() - start) * 1e3)
    return {k: statistics.median(v[2:]) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    add_save_argument(parser)
    args = parser.parse_args()
    with saved_output(args.save, __file__):
        print(host_line())
        print(f"{args.tokens} tokens, blocks of {BLOCK}, median of {args.rounds - 2} interleaved rounds")
        print("| threads | features | variant | ms (forward + backward) | / butterfly on autograd |")
        print("|---:|---:|---|---:|---:|")
        for threads in args.threads:
            torch.set_num_threads(threads)
            for features in (576, 1536):
                got = run(args.tokens, features, args.rounds)
                base = got["butterfly on autograd"]
                for name, ms in got.items():
                    print(f"| {threads} | {features} | {name} | {ms:.2f} | {ms / base:.2f} |")


if __name__ == "__main__":
    main()
