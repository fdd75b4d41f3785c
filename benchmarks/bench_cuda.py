"""groupquant on a GPU: fake-quant / quantize against the memory floor, and a training step.

Run by hand on a machine with a CUDA GPU (from the repository root):

    PYTHONPATH=src python benchmarks/bench_cuda.py                 # both tables
    PYTHONPATH=src python benchmarks/bench_cuda.py --ops --size 4096 --reps 10
    PYTHONPATH=src python benchmarks/bench_cuda.py --device cpu --size 64 --features 64 --batch 32 \
        --reps 2 --compile-backend eager                           # a smoke run, no GPU (the suite's)

Each function is timed two ways, in turn with the others of its row (``interleaved``): **a call**,
the median over ``--reps`` calls with the device idle before each (CUDA events around one call:
the host's launch overhead counts, the issue's measure), and **queued**, ``--reps`` calls back to
back between one pair of events, divided by ``--reps`` (the device's own time a call wherever it,
not the host, is what waits: a training loop that never synchronizes).

Table 1 (``--ops``): for an N x N tensor (8192 by default) of bfloat16, float16 and float32, every MX
format and NVFP4 (two-level, whose tensor amax is one more read of x, and single-level), grouped
along the last dim and along dim 0: ``fake_quant`` and ``quantize`` (codes + scale bytes), and each
one's ratio to ``x.clone()`` in the same mode (the same bytes read and written: the floor). The
targets: at most 1.5x clone (2x for two-level NVFP4). Where importable (not dependencies of
groupquant): torchao's compiled ``MXTensor.to_mx`` (+ ``dequantize``) and ``NVFP4Tensor.to_nvfp4``
on the last dim, and microxcaling's ``quantize_mx_op`` along both dims, for the ``--peer-dtypes`` (its
PyTorch ops, or with ``--mx-custom-cuda`` its CUDA kernels; ``make gpu-wheels MICROXCALING=<a
checkout>`` carries it to a lent GPU machine).

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
go into docs/cuda.md with the command that made them (``tests/benchmarks/test_bench_cuda.py``
smoke-runs it on the CPU, so a GPU session does not find it broken).
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
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
#: the other libraries table 1 times where importable
PEERS = ("torchao", "microxcaling")
#: the key of a function's queued time in :func:`interleaved`'s result
QUEUED = " (queued)"


@dataclass(frozen=True)
class Clock:
    """Times calls on one device: CUDA events on a GPU; elsewhere (``--device cpu``, the suite's
    smoke run of this script) the host's clock, the device synchronous."""

    device: torch.device

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def span(self, fn: Callable[[], object], calls: int) -> float:
        """Milliseconds from before the first of ``calls`` calls of ``fn``, queued one after the
        other without waiting, to the end of the last one's work on the device."""
        if self.device.type != "cuda":
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - t0) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def warm(self, fn: Callable[[], object]) -> None:
        """Three calls of ``fn`` (caches, compiled graphs, the allocator), then the device idle."""
        for _ in range(3):
            fn()
        self.sync()

    def per_call(self, fn: Callable[[], object], reps: int) -> float:
        """Median ms of one call of ``fn`` over ``reps`` calls, the device idle before each (after 3
        warm-ups): the host's launch overhead counts (the issue's measure)."""
        self.warm(fn)
        return statistics.median(self.span(fn, 1) for _ in range(reps))

    def queued(self, fn: Callable[[], object], reps: int) -> float:
        """Ms a call of ``fn`` when ``reps`` calls are queued back to back (after 3 warm-ups): the
        device's own time where it, not the host, is what waits (a training loop that never syncs)."""
        self.warm(fn)
        return self.span(fn, reps) / reps


def interleaved(fns: Dict[str, Callable[[], object]], reps: int, clock: Clock, rounds: int = 3) -> Dict[str, float]:
    """Ms of each function, per call (``name``) and queued (``name + QUEUED``), the functions timed
    in turn ``rounds`` times (a shared card sees the same load for all); the median over rounds."""
    out: Dict[str, List[float]] = {k: [] for name in fns for k in (name, name + QUEUED)}
    for _ in range(rounds):
        for k, fn in fns.items():
            out[k].append(clock.per_call(fn, reps))
            out[k + QUEUED].append(clock.queued(fn, reps))
    return {k: statistics.median(v) for k, v in out.items()}


def torchao_fns(x: torch.Tensor, label: str) -> Dict[str, Callable[[], object]]:
    """torchao 0.18's compiled MX / NVFP4 casts for this row (last dim), where importable and defined."""
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


def microxcaling_fns(x: torch.Tensor, label: str, dim: int, custom_cuda: bool) -> Dict[str, Callable[[], object]]:
    """microxcaling's fake quant (``quantize_mx_op``, blocks of 32 along ``dim``, round half to
    even) for an MX row, where ``mx`` is importable: its PyTorch ops, or (``custom_cuda``) its own
    CUDA kernels (built by torch on first use). It computes in the input's dtype, so on bfloat16 /
    float16 its results are not OCP's bit for bit; it has no codes output."""
    fmt = ROWS[label]["fmt"]
    if label.startswith("NVFP4"):
        return {}
    try:
        from mx.mx_ops import quantize_mx_op
        from mx.specs import MxSpecs
    except Exception:  # noqa: BLE001 - an optional peer: any import failure means "not here"
        return {}
    specs = MxSpecs()
    specs["custom_cuda"] = custom_cuda and x.is_cuda
    name = "microxcaling" + (" CUDA" if specs["custom_cuda"] else "") + " fake quant"
    return {name: lambda: quantize_mx_op(x, specs, elem_format=fmt, block_size=32, axes=[dim], round="even")}


def ms(v: float) -> str:
    """Milliseconds to 4 significant digits (a GPU's 0.2934, a smoke run's 0.001234)."""
    return f"{v:.4g}"


def ratio_text(t: Dict[str, float], name: str, base: str = "clone") -> str:
    """``name``'s ms per call and queued, each with its ratio to ``base`` in the same mode."""
    return (f"{ms(t[name])} | {t[name] / t[base]:.2f}x | {ms(t[name + QUEUED])} | "
            f"{t[name + QUEUED] / t[base + QUEUED]:.2f}x")


def ops_table(n: int, reps: int, peer_dtypes: List[str], clock: Clock, mx_custom_cuda: bool = False,
              peers_wanted: Tuple[str, ...] = PEERS) -> None:
    """Table 1 (see the module doc); the peers' columns for the dtypes in ``peer_dtypes``: torchao's
    (each row compiles two graphs, 10 - 30 s each) and microxcaling's (its PyTorch ops take many
    launches a call)."""
    device = clock.device
    print(f"\n## fake_quant / quantize, {n} x {n}, ms a call (median of {reps}, the device idle before each) "
          f"and queued ({reps} calls back to back); ratio to x.clone() in the same mode\n")
    print("| format | dtype | grouped along | clone ms | clone queued | fake quant ms | / clone | queued ms | "
          "/ clone | quantize ms | / clone | queued ms | / clone | peers: ms a call (queued) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    g = torch.Generator(device=device).manual_seed(0)
    for dname, dtype in DTYPES.items():
        x = (torch.randn(n, n, device=device, generator=g)
             * torch.logspace(-3, 3, n, device=device)).to(dtype)
        for label, kw in ROWS.items():
            for dim in (-1, 0):
                kwargs = dict(kw, dim=dim)
                fns = {"clone": lambda: x.clone(), "fake": lambda: gq.fake_quant(x, **kwargs),
                       "quantize": lambda: gq.quantize(x, **kwargs)}
                peers: Dict[str, Callable[[], object]] = {}
                if "microxcaling" in peers_wanted and dname in peer_dtypes:
                    peers.update(microxcaling_fns(x, label, dim, mx_custom_cuda))
                if "torchao" in peers_wanted and dim == -1 and dname in peer_dtypes and device.type == "cuda":
                    peers.update(torchao_fns(x, label))
                t = interleaved({**fns, **peers}, reps, clock)
                peer_text = ", ".join(f"{k} {ms(t[k])} ({ms(t[k + QUEUED])})" for k in peers) or "-"
                print(f"| {label} | {dname} | {'last dim' if dim == -1 else 'dim 0'} | {ms(t['clone'])} | "
                      f"{ms(t['clone' + QUEUED])} | {ratio_text(t, 'fake')} | {ratio_text(t, 'quantize')} | "
                      f"{peer_text} |", flush=True)


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


def peak_memory(step: Callable[[], None]) -> Optional[int]:
    """Peak bytes allocated on the GPU during one ``step`` above what was allocated before it
    (None off a GPU: the CPU allocator keeps no such count)."""
    if not torch.cuda.is_available():
        return None
    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def train_models(k: int, device: str = "cuda") -> Dict[str, torch.nn.Module]:
    """The layers of table 2 (bfloat16 ``Linear(k, k)`` on ``device``), by name; nn.Linear first."""
    base = torch.nn.Linear(k, k, device=device, dtype=torch.bfloat16)
    quant = QuantLinear(k, k, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act,
                        device=device, dtype=torch.bfloat16)
    recipe = quantize_model(torch.nn.Sequential(torch.nn.Linear(k, k, device=device, dtype=torch.bfloat16)),
                            recipe="mxfp8")
    return {"nn.Linear": base, "QuantLinear MXFP8 W+A": quant, "recipe mxfp8": recipe}


def mib_text(mem: Dict[str, Optional[int]], name: str) -> str:
    """``name``'s peak MiB and its ratio to nn.Linear's, or dashes off a GPU."""
    if mem[name] is None:
        return "- | -"
    return f"{mem[name] / 2 ** 20:.0f} | {mem[name] / mem['nn.Linear']:.2f}x"


def train_table(k: int, batch: int, reps: int, clock: Clock, compile_backend: str = "inductor") -> None:
    """Table 2 (see the module doc)."""
    device = clock.device
    torch.manual_seed(0)
    x = torch.randn(batch, k, device=device, dtype=torch.bfloat16)
    grad = torch.randn(batch, k, device=device, dtype=torch.bfloat16)
    models = train_models(k, device.type)
    steps: Dict[str, Callable[[], None]] = {}
    breaks: Dict[str, Optional[int]] = {}
    for name, m in models.items():
        steps[name] = train_step_fn(m, x, grad)
        compiled = torch.compile(m, backend=compile_backend)
        steps[name + " (compiled)"] = train_step_fn(compiled, x, grad)
        try:
            breaks[name] = graph_breaks(m, x)
        except Exception as exc:  # noqa: BLE001 - reported in the table, not hidden
            print(f"explain failed for {name}: {exc!r}")
            breaks[name] = None
    t = interleaved(steps, reps, clock)
    mem = {name: peak_memory(step) for name, step in steps.items()}
    fresh = {name: peak_memory(train_step_fn(m, x, grad, fresh_input=True)) for name, m in models.items()}
    print(f"\n## training step, bfloat16, Linear {k} -> {k}, batch {batch}: forward + backward, ms a step "
          f"(median of {reps}, the device idle before each) and queued ({reps} steps back to back); "
          f"compiled: torch.compile(backend={compile_backend!r})\n")
    print("| layer | eager ms | / nn.Linear | queued ms | / nn.Linear | compiled ms | / eager | queued ms | / eager "
          "| graph breaks | peak MiB | / nn.Linear | peak MiB, x made in the step | / nn.Linear |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in models:
        c = name + " (compiled)"
        eager, comp, eager_q, comp_q = t[name], t[c], t[name + QUEUED], t[c + QUEUED]
        print(f"| {name} | {ms(eager)} | {eager / t['nn.Linear']:.2f}x | {ms(eager_q)} | "
              f"{eager_q / t['nn.Linear' + QUEUED]:.2f}x | {ms(comp)} | {comp / eager:.2f}x | {ms(comp_q)} | "
              f"{comp_q / eager_q:.2f}x | {breaks[name]} | {mib_text(mem, name)} | {mib_text(fresh, name)} |",
              flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", action="store_true", help="table 1 only (with --train: both)")
    parser.add_argument("--train", action="store_true", help="table 2 only (with --ops: both)")
    parser.add_argument("--size", type=int, default=8192, help="N of the N x N tensor of table 1")
    parser.add_argument("--features", type=int, default=4096, help="K of the Linear(K, K) of table 2")
    parser.add_argument("--batch", type=int, default=8192, help="tokens of table 2")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--peer-dtypes", nargs="*", default=["bf16"], choices=sorted(DTYPES),
                        help="the dtypes of table 1 that get the peers' columns (default: bf16)")
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS,
                        help="the other libraries table 1 times, where importable (default: both)")
    parser.add_argument("--mx-custom-cuda", action="store_true",
                        help="time microxcaling's own CUDA kernels (custom_cuda; torch builds them on first use), "
                             "not its PyTorch ops")
    parser.add_argument("--device", default="cuda",
                        help="cuda (the figures); cpu runs the tables on the host's clock, for a smoke run")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile's backend in table 2 (the smoke run: eager)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_cuda.py needs a CUDA GPU (torch.cuda.is_available() is False); "
                         "--device cpu runs it on the host, for a smoke run")
    both = args.ops == args.train
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        print(f"card: {props.name} ({props.total_memory / 2 ** 30:.0f} GiB), torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}, groupquant backend {gq.ops.native.backend()} "
              f"(CUDA kernels: {gq.ops.native.native_available(device)})")
    else:
        print(f"device: {device} (host clock, a smoke run), torch {torch.__version__}, "
              f"groupquant backend {gq.ops.native.backend()}")
    clock = Clock(device)
    if both or args.ops:
        ops_table(args.size, args.reps, args.peer_dtypes, clock, args.mx_custom_cuda, tuple(args.peers))
    if both or args.train:
        train_table(args.features, args.batch, args.reps, clock, args.compile_backend)


if __name__ == "__main__":
    main()
