"""QAT cost of group-wise fake-quant: a 4096x4096 linear layer, forward + backward at batch 256.

Run by hand (from the repository root):

    PYTHONPATH=src python benchmarks/bench_qat.py

Compares, in one run, plain nn.Linear with groupquant.nn.QuantLinear (MX weight quant, groups of
32 along in-features, with and without MX input quant, groups of 32 along the last dim): median
time of forward + backward (timed round-robin), and peak memory of one step from torch.profiler's memory timeline, two
ways: ``peak MiB`` counts every tensor alive during it (parameters, input, activations, gradients,
temporaries), ``step MiB`` only the tensors the step allocates (what a step adds on top of the
model: the measure of issue 17's target, at most 1.3x float with every GEMM operand quantized). QuantLinear takes its memory-lean backward (groupquant.nn.gemm.lean_gemm: the quantized
weight is used for the input gradient, then overwritten by the weight gradient); one row shows
the same layer on plain autograd (memory_lean_backward = False). One more row is not a library
layer: the bare F.linear(fake_quant(x), fake_quant(W)) (the kernels' own share); one is the layer
with recompute_quantized_weight (its backward makes the quantized weight again instead of keeping
it from the forward). One row per
training recipe (``--recipes``): every operand of every GEMM quantized, six quantized operands
(groupquant.nn.RECIPES). ``--device cuda`` times on a GPU (peak memory from the CUDA allocator).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import groupquant as gq
from groupquant.nn import QuantLinear
from groupquant.quantizers import (MXFloat4e2m1Act, MXFloat4e2m1Weight, MXFloat6e2m3Act, MXFloat6e2m3Weight,
                                   MXFloat6e3m2Act, MXFloat6e3m2Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight,
                                   MXFloat8e5m2Act, MXFloat8e5m2Weight, MXInt8Act, MXInt8Weight)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the benchmarks' shared helpers
from result_files import add_save_argument, saved_output  # noqa: E402

QUANTIZERS = {  # format -> (weight quantizer, activation quantizer)
    "int8": (MXInt8Weight, MXInt8Act), "fp8_e4m3": (MXFloat8e4m3Weight, MXFloat8e4m3Act),
    "fp8_e5m2": (MXFloat8e5m2Weight, MXFloat8e5m2Act), "fp6_e3m2": (MXFloat6e3m2Weight, MXFloat6e3m2Act),
    "fp6_e2m3": (MXFloat6e2m3Weight, MXFloat6e2m3Act), "fp4_e2m1": (MXFloat4e2m1Weight, MXFloat4e2m1Act),
}


class FakeQuantLinear(torch.nn.Linear):
    """The bare composition: F.linear(fake_quant(x), fake_quant(W), b): the kernels' share of a QAT step."""

    def __init__(self, in_features: int, out_features: int, fmt: str) -> None:
        super().__init__(in_features, out_features)
        self.fmt = fmt

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(gq.fake_quant(x, self.fmt), gq.fake_quant(self.weight, self.fmt), self.bias)


def recompute_weight(layer: QuantLinear) -> QuantLinear:
    """The layer with its lean backward making the quantized weight again (recompute_quantized_weight)."""
    layer.recompute_quantized_weight = True
    return layer


def plain_autograd(layer: QuantLinear) -> QuantLinear:
    """The layer with its memory-lean backward switched off (F.linear on the fake-quant weight)."""
    layer.memory_lean_backward = False
    return layer


def step_fn(layer: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    grad = torch.randn(x.shape[0], layer.out_features, device=x.device)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)

    def step() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).backward(grad)
        sync()
    return step


def median_ms_interleaved(fns: Dict[str, Callable[[], None]], reps: int) -> Dict[str, float]:
    """Median ms of each fn, timed round-robin so that load from other processes hits all alike."""
    for fn in fns.values():
        fn()
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def _timeline(fn: Callable[[], None]) -> list:
    """torch.profiler's memory timeline of one call of fn() (after a warm-up call)."""
    fn()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        fn()
    return prof._memory_profile().timeline


def peak_mib(fn: Callable[[], None], cuda: bool = False) -> Tuple[float, float]:
    """Peak MiB of one call of fn(), two ways: (every tensor alive during it, those alive before
    it included; only the tensors allocated during it, at the moment their sum is largest).

    The second is what a step adds on top of the model and its data: parameters, the input and
    tensors kept from before (last step's gradients, freed by zero_grad inside the step, do not
    count as room gained). On CUDA: (max_memory_allocated, max_memory_allocated minus what was
    allocated when the step began).
    """
    from torch.profiler._memory_profiler import Action

    if cuda:
        fn()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        peak = torch.cuda.max_memory_allocated()
        return peak / 2 ** 20, (peak - before) / 2 ** 20
    current = peak = 0
    created: Dict[object, int] = {}  # tensors allocated during the step -> bytes
    step = step_peak = 0
    for _, action, (key, _version), size in _timeline(fn):
        if action in (Action.PREEXISTING, Action.CREATE):
            current += size
        elif action == Action.DESTROY:
            current -= size
        if action == Action.CREATE:
            created[key] = size
            step += size
        elif action == Action.DESTROY and key in created:
            step -= created.pop(key)
        peak, step_peak = max(peak, current), max(step_peak, step)
    return peak / 2 ** 20, step_peak / 2 ** 20


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--format", default="fp8_e4m3", choices=sorted(QUANTIZERS),
                        help="MX element format of weight and input")
    parser.add_argument("--recipes", nargs="*", default=["mxfp8_e4m3_e5m2", "mxfp8", "mxfp4_fwd_mxfp8_bwd"],
                        choices=sorted(gq.nn.RECIPES), help="training recipes to time (six quantized operands)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--no-input-grad", action="store_true",
                        help="input without requires_grad (a first layer: no input-gradient GEMM, and autograd "
                             "then keeps no copy of the quantized weight)")
    add_save_argument(parser)
    args = parser.parse_args(argv)
    with saved_output(args.save, __file__, argv):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    """Time and measure every layer of the table for the parsed arguments, and print the table."""
    torch.set_flush_denormal(True)
    n, fmt, device = args.features, args.format, torch.device(args.device)
    print(f"groupquant backend: {gq.ops.backend()}; torch {torch.__version__}; threads {torch.get_num_threads()}; "
          f"Linear({n}, {n}), batch {args.batch}, {fmt}, forward + backward, median of {args.reps}; "
          f"input requires grad: {not args.no_input_grad}; torch.set_flush_denormal(True)")
    torch.manual_seed(0)
    x = torch.randn(args.batch, n, device=device, requires_grad=not args.no_input_grad)  # a hidden activation
    wq, aq = QUANTIZERS[fmt]
    layers = {
        "nn.Linear (float)": torch.nn.Linear(n, n),
        f"QuantLinear MX {fmt} weight + input": QuantLinear(n, n, weight_quant=wq, input_quant=aq),
        f"QuantLinear MX {fmt} W + A + dY (every operand)":
            QuantLinear(n, n, weight_quant=wq, input_quant=aq, grad_output_quant=aq),
        f"QuantLinear MX {fmt} weight only": QuantLinear(n, n, weight_quant=wq),
        f"QuantLinear MX {fmt} W + A, plain autograd":
            plain_autograd(QuantLinear(n, n, weight_quant=wq, input_quant=aq)),
        "fake_quant W + A, F.linear": FakeQuantLinear(n, n, fmt),
        f"QuantLinear MX {fmt} W + A, Wq made again":
            recompute_weight(QuantLinear(n, n, weight_quant=wq, input_quant=aq)),
    }
    layers.update({f"recipe {name}": QuantLinear(n, n, **gq.nn.recipe(name).layer_kwargs()) for name in args.recipes})
    layers = {name: layer.to(device) for name, layer in layers.items()}
    steps = {name: step_fn(layer, x) for name, layer in layers.items()}
    times = median_ms_interleaved(steps, args.reps)
    base = None
    print(f"{'layer':50} {'ms':>8} {'x float':>8} {'peak MiB':>9} {'x float':>8} {'step MiB':>9} {'x float':>8}")
    for name, step in steps.items():
        ms, (mem, step_mem) = times[name], peak_mib(step, device.type == "cuda")
        base = base or (ms, mem, step_mem)
        print(f"{name:50} {ms:8.1f} {ms / base[0]:8.2f} {mem:9.1f} {mem / base[1]:8.2f} {step_mem:9.1f} "
              f"{step_mem / base[2]:8.2f}", flush=True)
    print("peak MiB: every tensor alive during the step (parameters and input included); step MiB: only what the "
          "step allocates (targets for every operand quantized: step memory <= 1.3x, time <= 1.5x float)")


if __name__ == "__main__":
    main()
