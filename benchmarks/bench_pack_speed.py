"""Packing speed: ``pack_model`` / ``packed_state_dict`` of one layer against ``groupquant.quantize``
of the same weight, in the same run (issue 17: packing within 2x of the quantize op).

Run by hand (from the repository root):

    PYTHONPATH=src python benchmarks/bench_pack_speed.py                  # 4096 x 4096, 2 threads
    PYTHONPATH=src python benchmarks/bench_pack_speed.py --size 1024 --rounds 2

For each weight format (MXFP4, MXFP8 E4M3, MXINT8, NVFP4) it prints the best time (ms) over
``--rounds`` of

- ``quantize``: ``groupquant.quantize(W, ...)`` with the layer's quantizer settings (codes and scale bytes);
- ``pack_model``: ``groupquant.pack_model`` of a model holding the one QuantLinear (a fresh copy each
  round, the copy not timed);
- ``packed_state_dict``: ``groupquant.export.packed_state_dict`` of that QuantLinear model;

and the ratios ``pack_model / quantize`` and ``packed_state_dict / quantize`` (target: at most 2).
Everything is timed in turn inside every round (the machine may be shared), best round counts.
"""
from __future__ import annotations

import argparse
import copy
import time
from typing import Callable, Dict

import torch
from torch import nn

import groupquant as gq
from groupquant.export import packed_state_dict
from groupquant.nn import QuantLinear
from groupquant.quantizers import MXFloat4e2m1Weight, MXFloat8e4m3Weight, MXInt8Weight, NVFP4Weight

#: name -> (weight quantizer, the quantize() format of the same weight)
FORMATS = {"MXFP4": (MXFloat4e2m1Weight, "fp4_e2m1"), "MXFP8 e4m3": (MXFloat8e4m3Weight, "fp8_e4m3"),
           "MXINT8": (MXInt8Weight, "int8"), "NVFP4": (NVFP4Weight, "nvfp4")}


def seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(size: int, rounds: int) -> None:
    print(f"packing one {size} x {size} float32 layer, {torch.get_num_threads()} threads, best of {rounds} rounds "
          f"(backend: {gq.ops.backend()})")
    print(f"{'format':<12} {'quantize ms':>12} {'pack_model ms':>14} {'state_dict ms':>14} {'pack/quant':>11} "
          f"{'sd/quant':>9}")
    for name, (quant, fmt) in FORMATS.items():
        torch.manual_seed(0)
        model = nn.Sequential(QuantLinear(size, size, weight_quant=quant)).eval()
        weight = model[0].weight.detach()
        best: Dict[str, float] = {"q": float("inf"), "p": float("inf"), "s": float("inf")}
        for _ in range(rounds):
            fresh = copy.deepcopy(model)
            best["q"] = min(best["q"], seconds(lambda: gq.quantize(weight, fmt)))
            best["p"] = min(best["p"], seconds(lambda: gq.pack_model(fresh)))
            best["s"] = min(best["s"], seconds(lambda: packed_state_dict(model)))
        q, p, s = (best[k] * 1e3 for k in "qps")
        print(f"{name:<12} {q:12.1f} {p:14.1f} {s:14.1f} {p / q:11.2f} {s / q:9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run(args.size, args.rounds)


if __name__ == "__main__":
    main()
