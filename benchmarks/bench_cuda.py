"""groupquant on a GPU: fake-quant / quantize against the memory floor, and a training step.

Run by hand on a machine with a CUDA GPU (from the repository root):

    PYTHONPATH=src python benchmarks/bench_cuda.py                 # both tables
    PYTHONPATH=src python benchmarks/bench_cuda.py --ops --size 4096 --reps 10

Table 1 (``--ops``): for an N x N tensor (8192 by default) of bfloat16, float16 and float32, every MX
format and NVFP4 (two-level, whose tensor amax is one more read of x, and single-level), grouped
along the last dim and along dim 0: the median time (CUDA events, ``--reps`` calls after a warm-up)
of ``fake_quant`` and of ``quantize`` (codes + scale bytes), and its ratio to ``x.clone()`` measured
in the same run (the same bytes read and written: the floor). The targets: at most 1.5x clone (2x
for two-level NVFP4). Where importable (not dependencies of groupquant), torchao's compiled
``MXTensor.to_mx`` (+ ``dequantize``) and ``NVFP4Tensor.to_nvfp4`` and microxcaling's
``quantize_mx_op`` are timed on the same tensor.

Table 2 (``--train``): one training step (forward + backward, bfloat16, ``Linear(K, K)`` on a
batch of B tokens; 4096 and 8192 by default) of ``nn.Linear``, ``QuantLinear`` with MXFP8 weight
and input, and the recipe ``mxfp8`` (every GEMM operand of forward and backward quantized), eager
and under ``torch.compile`` (with the count of graph breaks), with the ratio to ``nn.Linear`` and
the peak ``torch.cuda.max_memory_allocated`` of the step as a ratio too, with ``x`` held by the
caller and with ``x`` made in the step (``x * 1``: then a layer's saved input, x or its quantized
copy, is the only input-sized tensor the backward keeps, as in a network). Targets: recipe <= 1.25x,
QuantLinear <= 1.15x time and memory, compiled never slower than eager. What is alive at the peak
of each step: benchmarks/cuda_memory_peak.py.

Prints the card, torch, CUDA and groupquant backend first. Nothing here is asserted: the figures
go into docs/cuda.md with the command that made them.
"""
from __future__ import annotations

import argparse
import statistics
from typing import Callable, Dict, List, Optional, Tuple

import torch

import groupquant as gq
from groupquant.nn import QuantLinear, quantize_model
from groupquant.quantizers import MXFloat8e4m3Act, MXFloat8e4m3Weight

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
#: rows of table 1: label -> fake_quant / quantize keywords
ROWS: Dict[str, Dict[str, object]] = {
    "MXFP8 e4m3": {"fmt": "fp8_e4m3"}, "MXFP8 e5m2": {"fmt": "fp8_e5m2"}, "MXFP6 e3m2": {"fmt": "fp6_e3m2"},
    "MXFP6 e2m3": {"fmt": "fp6_e2m3"}, "MXFP4": {"fmt": "fp4_e2m1"}, "MXINT8": {"fmt": "int8"},
    "NVFP4": {"fmt": "nvfp4"}, "NVFP4 1-level": {"fmt": "nvfp4", "tensor_scale": False}}


def cuda_time(fn: Callable[[], object], reps: int) -> float:
    """Median milliseconds of ``fn`` over ``reps`` calls, each between two CUDA events (after 3 warm-ups)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def interleaved(fns: Dict[str, Callable[[], object]], reps: int, rounds: int = 3) -> Dict[str, float]:
    """Median ms of each function, the functions timed in turn ``rounds`` times (a shared card sees
    the same load for all); the median over rounds of each round's median."""
    out: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            out[k].append(cuda_time(fn, reps))
    return {k: statistics.median(v) for k, v in out.items()}


def torchao_fns(x: torch.Tensor, label: str) -> Dict[str, Callable[[], object]]:
    """torchao 0.18's compiled MX / NVFP4 casts for this row, where importable and defined."""
    try:
        from torchao.prototype.mx_formats.mx_tensor import MXTensor
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor
    except Exception:  # noqa: BLE001 - an optional peer: any import failure means "not here"
        return {}
    elem = {"MXFP8 e4m3": torch.float8_e4m3fn, "MXFP8 e5m2": torch.float8_e5m2, "MXFP4": torch.float4_e2m1fn_x2}
    fns: Dict[str, Callable[[], object]] = {}
    if label in elem:
        to_mx = torch.compile(lambda t: MXTensor.to_mx(t, elem[label], 32))
        fq = torch.compile(lambda t: MXTensor.to_mx(t, elem[label], 32).dequantize(t.dtype))
        fns = {"torchao quantize": lambda: to_mx(x), "torchao fake quant": lambda: fq(x)}
    elif label == "NVFP4" and x.dtype == torch.bfloat16:
        def cast(t):
            from torchao.prototype.mx_formats.nvfp4_tensor import per_tensor_amax_to_scale
            return NVFP4Tensor.to_nvfp4(t, per_tensor_scale=per_tensor_amax_to_scale(t.abs().max()))
        nv = torch.compile(cast)
        fns = {"torchao quantize": lambda: nv(x), "torchao fake quant": lambda: nv(x).dequantize(x.dtype)}
    return fns


def ops_table(n: int, reps: int, peer_dtypes: List[str]) -> None:
    """Table 1 (see the module doc); torchao's columns for the dtypes in ``peer_dtypes`` (each
    torchao row compiles two graphs, 10 - 30 s each)."""
    print(f"\n## fake_quant / quantize, {n} x {n}, median ms of {reps} (CUDA events); ratio to x.clone()\n")
    print("| format | dtype | grouped along | clone ms | fake quant ms | / clone | quantize ms | / clone | peers |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    g = torch.Generator(device="cuda").manual_seed(0)
    for dname, dtype in DTYPES.items():
        x = (torch.randn(n, n, device="cuda", generator=g)
             * torch.logspace(-3, 3, n, device="cuda")).to(dtype)
        for label, kw in ROWS.items():
            for dim in (-1, 0):
                kwargs = dict(kw, dim=dim)
                fns = {"clone": lambda: x.clone(), "fake": lambda: gq.fake_quant(x, **kwargs),
                       "quantize": lambda: gq.quantize(x, **kwargs)}
                peers = torchao_fns(x, label) if dim == -1 and dname in peer_dtypes else {}
                t = interleaved({**fns, **peers}, reps)
                peer_text = ", ".join(f"{k} {v:.3f}" for k, v in t.items() if k.startswith("torchao")) or "-"
                print(f"| {label} | {dname} | {'last dim' if dim == -1 else 'dim 0'} | {t['clone']:.3f} | "
                      f"{t['fake']:.3f} | {t['fake'] / t['clone']:.2f}x | {t['quantize']:.3f} | "
                      f"{t['quantize'] / t['clone']:.2f}x | {peer_text} |", flush=True)


def graph_breaks(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> int:
    """How many graph breaks torch.compile makes in ``fn(x)`` (``torch._dynamo.explain``)."""
    torch._dynamo.reset()
    return int(torch._dynamo.explain(fn)(x).graph_break_count)


def train_step_fn(model: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor,
                  fresh_input: bool = False) -> Callable[[], None]:
    """One forward + backward of ``model`` on ``x`` (gradients cleared first). ``fresh_input``: on
    ``x * 1``, an input made in the step that nothing but the layer keeps (as in a network, where
    a layer's input is the output of the op before it), so what the layer saves for backward is
    all that keeps an input-sized tensor alive; otherwise the caller holds ``x`` throughout."""
    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x * 1 if fresh_input else x).backward(grad)
    return step


def peak_memory(step: Callable[[], None]) -> int:
    """Peak bytes allocated during one ``step`` above what was allocated before it."""
    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def train_models(k: int) -> Dict[str, torch.nn.Module]:
    """The layers of table 2 (bfloat16 ``Linear(k, k)`` on the GPU), by name; nn.Linear first."""
    base = torch.nn.Linear(k, k, device="cuda", dtype=torch.bfloat16)
    quant = QuantLinear(k, k, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act,
                        device="cuda", dtype=torch.bfloat16)
    recipe = quantize_model(torch.nn.Sequential(torch.nn.Linear(k, k, device="cuda", dtype=torch.bfloat16)),
                            recipe="mxfp8")
    return {"nn.Linear": base, "QuantLinear MXFP8 W+A": quant, "recipe mxfp8": recipe}


def train_table(k: int, batch: int, reps: int) -> None:
    """Table 2 (see the module doc)."""
    torch.manual_seed(0)
    x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
    grad = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
    models = train_models(k)
    steps: Dict[str, Callable[[], None]] = {}
    breaks: Dict[str, Optional[int]] = {}
    for name, m in models.items():
        steps[name] = train_step_fn(m, x, grad)
        compiled = torch.compile(m)
        steps[name + " (compiled)"] = train_step_fn(compiled, x, grad)
        try:
            breaks[name] = graph_breaks(m, x)
        except Exception as exc:  # noqa: BLE001 - reported in the table, not hidden
            print(f"explain failed for {name}: {exc!r}")
            breaks[name] = None
    t = interleaved(steps, reps)
    mem = {name: peak_memory(step) for name, step in steps.items()}
    fresh = {name: peak_memory(train_step_fn(m, x, grad, fresh_input=True)) for name, m in models.items()}
    print(f"\n## training step, bfloat16, Linear {k} -> {k}, batch {batch}: forward + backward, median ms of {reps}\n")
    print("| layer | eager ms | / nn.Linear | compiled ms | / eager | graph breaks | peak MiB | / nn.Linear "
          "| peak MiB, x made in the step | / nn.Linear |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in models:
        eager, comp = t[name], t[name + " (compiled)"]
        print(f"| {name} | {eager:.3f} | {eager / t['nn.Linear']:.2f}x | {comp:.3f} | {comp / eager:.2f}x | "
              f"{breaks[name]} | {mem[name] / 2 ** 20:.0f} | {mem[name] / mem['nn.Linear']:.2f}x | "
              f"{fresh[name] / 2 ** 20:.0f} | {fresh[name] / fresh['nn.Linear']:.2f}x |", flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", action="store_true", help="table 1 only (with --train: both)")
    parser.add_argument("--train", action="store_true", help="table 2 only (with --ops: both)")
    parser.add_argument("--size", type=int, default=8192, help="N of the N x N tensor of table 1")
    parser.add_argument("--features", type=int, default=4096, help="K of the Linear(K, K) of table 2")
    parser.add_argument("--batch", type=int, default=8192, help="tokens of table 2")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--peer-dtypes", nargs="*", default=["bf16"], choices=sorted(DTYPES),
                        help="the dtypes of table 1 that get torchao's compiled columns (default: bf16)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_cuda.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    both = args.ops == args.train
    props = torch.cuda.get_device_properties(0)
    print(f"card: {props.name} ({props.total_memory / 2 ** 30:.0f} GiB), torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, groupquant backend {gq.ops.native.backend()} "
          f"(CUDA kernels: {gq.ops.native.native_available(torch.device('cuda'))})")
    if both or args.ops:
        ops_table(args.size, args.reps, args.peer_dtypes)
    if both or args.train:
        train_table(args.features, args.batch, args.reps)


if __name__ == "__main__":
    main()
