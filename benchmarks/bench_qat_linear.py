"""QAT cost of a quant layer: time of one forward+backward and bytes saved for backward,
QuantLinear (several quantizer pairs) against nn.Linear measured in the same run.

    PYTHONPATH=src python benchmarks/bench_qat_linear.py [--features 1024] [--batch 256] [--repeat 10]

Bytes saved for backward are counted with torch.autograd.graph.saved_tensors_hooks: distinct
storages other than the layer's parameters and its input (which exist anyway), i.e. the extra
memory a training step holds per layer. F.linear saves its (quantized) input and weight; the
quantizers add only what they save themselves (group-wise scales stay [O, k, 1]).
"""
from __future__ import annotations

import argparse
import time
from typing import Callable, Dict, Iterable

import torch
from torch import nn

from groupquant.nn import QuantLinear
from groupquant.quantizers import (Int8ActPerTensor, Int8WeightPerChannel, LearnedScaling, MXFloat4e2m1Weight,
                                   MXFloat8e4m3Act, MXInt8Act, MXInt8Weight)


class LearnedMXFloat4e2m1Weight(LearnedScaling, MXFloat4e2m1Weight):
    """MXFP4 weights with learned E8M0 group scales."""


def saved_bytes(step: Callable[[], torch.Tensor], existing: Iterable[torch.Tensor]) -> int:
    """Bytes of distinct storages autograd saves during ``step()`` (forward only), leaving out
    the storages of ``existing`` tensors."""
    skip = {t.untyped_storage().data_ptr() for t in existing}
    seen: Dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(seen.values())


def timed(step: Callable[[], None], repeat: int) -> float:
    """Median seconds of ``step`` over ``repeat`` runs (after one warm-up)."""
    step()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    n, b = args.features, args.batch
    torch.manual_seed(0)
    x = torch.randn(b, n, requires_grad=True)
    layers = {
        "nn.Linear (baseline)": nn.Linear(n, n),
        "MXFP4 W + MXFP8 A": QuantLinear(n, n, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act),
        "MXINT8 W + MXINT8 A": QuantLinear(n, n, weight_quant=MXInt8Weight, input_quant=MXInt8Act),
        "learned MXFP4 W + MXFP8 A": QuantLinear(n, n, weight_quant=LearnedMXFloat4e2m1Weight,
                                                 input_quant=MXFloat8e4m3Act),
        "int8 per-channel W + int8 A": QuantLinear(n, n, weight_quant=Int8WeightPerChannel,
                                                   input_quant=Int8ActPerTensor),
    }
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, x [{b}, {n}], weight [{n}, {n}], "
          f"flush denormals: not changed")
    print(f"{'layer':30s} {'fwd+bwd ms':>11s} {'ratio':>7s} {'saved MiB':>10s}")
    base_t = None
    for name, layer in layers.items():
        def step() -> None:
            layer.zero_grad(set_to_none=True)
            layer(x).sum().backward()
        t = timed(step, args.repeat)
        mem = saved_bytes(lambda: layer(x).sum(), [x, *layer.parameters()])
        base_t = base_t or t
        print(f"{name:30s} {t * 1e3:11.2f} {t / base_t:7.2f} {mem / 2 ** 20:10.2f}")


if __name__ == "__main__":
    main()
