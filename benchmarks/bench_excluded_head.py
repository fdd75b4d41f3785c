"""A decode step of a small language-model shape with its output head excluded from a recipe:
``body = Linear(576, 576)`` quantized (MXFP8), ``lm_head = Linear(576, 49152)`` left float with
``exclude="lm_head"`` (SmolLM2-135M's hidden and vocabulary sizes), batch 1, one token, eval.

    PYTHONPATH=src python benchmarks/bench_excluded_head.py [--repeat N] [--threads N]

Rows (ms per forward, median over ``--repeat`` rounds of 10 calls): the whole quantized model,
and the float head alone. An excluded layer stays float on every route, so the model costs about
the head plus the small body; before the fix the function mode re-quantized the excluded head's
weight on every call (issue 17 item 12).
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch
from torch import nn

import groupquant as gq


class TinyLM(nn.Module):
    """One quantized body layer and a large output head."""

    def __init__(self, hidden: int = 576, vocab: int = 49152) -> None:
        super().__init__()
        self.body = nn.Linear(hidden, hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(torch.relu(self.body(x)))


def _ms(fn: Callable[[], object], repeat: int, loops: int = 10) -> float:
    """Median over ``repeat`` rounds of the mean time per call, in milliseconds."""
    fn()
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        rounds.append((time.perf_counter() - start) / loops * 1e3)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = gq.quantize_model(TinyLM(), recipe="mxfp8", exclude="lm_head").eval()
    x = torch.randn(1, 1, 576)
    with torch.no_grad():
        whole = _ms(lambda: model(x), args.repeat)
        head = _ms(lambda: torch.nn.functional.linear(x, model.lm_head.weight), args.repeat)
    print(f"threads {args.threads}")
    print(f"{'quantized model (MXFP8 body, head excluded)':<46} {whole:8.2f} ms")
    print(f"{'float head alone (F.linear 576 -> 49152)':<46} {head:8.2f} ms")


if __name__ == "__main__":
    main()
