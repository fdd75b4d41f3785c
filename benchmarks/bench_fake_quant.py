"""Speed of group-wise fake-quant on a 4096x4096 tensor: native op vs PyTorch reference vs x.clone().

Run by hand (from the repository root):

    PYTHONPATH=src python benchmarks/bench_fake_quant.py            # native, reference, compiled reference
    PYTHONPATH=src python benchmarks/bench_fake_quant.py --no-compile --peers

For fp32 and bf16 and every MX format (blocks of 32, E8M0 scales) and NVFP4 (``nvfp4``: blocks of
16, UE4M3 scales and the per-tensor float32 scale, whose amax costs one more pass over x in
Python, ``torch.aminmax``; ``nvfp4-1l``: the single-level variant, ``tensor_scale=False``) it prints the median time (ms) and the memory traffic
rate (GB/s: one read of x and one write of the result) of the native op, the PyTorch reference
and torch.compile of the reference, with x.clone() (the same traffic, no arithmetic) as the
memory floor measured in the same run; the ratio "x clone" is the figure to read. The table is
measured with torch.set_flush_denormal(True), then the native op alone again without it. A last
table times quantize (codes and scales, what packing and export store) along the last dim and dim 0
(``--quantize-only``: that table alone; ``--native-only``: no reference columns). The
native op and clone are timed alternately (the machine may be shared: both see the same load).
With --peers also Brevitas / torchao / microxcaling, where importable (not dependencies).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

import groupquant as gq
from groupquant.ops import make_spec, reference_fake_quant
from groupquant.ops.native_ops import native_fake_quant, native_quantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the benchmarks' shared helpers
from result_files import add_save_argument, saved_output  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
#: benchmark rows beyond the MX format names: label -> make_spec arguments
SCHEME_ROWS: Dict[str, Dict[str, object]] = {"nvfp4": {"fmt": "nvfp4"},
                                              "nvfp4-1l": {"fmt": "nvfp4", "tensor_scale": False}}


def row_spec(x: torch.Tensor, row: str, dim: int = -1):
    """The GroupSpec of a benchmark row (an MX format name, or one of :data:`SCHEME_ROWS`), grouped along dim."""
    kwargs = dict(SCHEME_ROWS.get(row, {"fmt": row}))
    return make_spec(x, kwargs.pop("fmt"), dim=dim, **kwargs)


def median_ms(fn: Callable[[], object], reps: int) -> float:
    """Median wall time of fn() in milliseconds, after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def paired_ms(fn: Callable[[], object], base: Callable[[], object], reps: int) -> Tuple[float, float]:
    """Median ms of fn() and of base(), timed alternately so that load from other processes hits both alike."""
    fn()
    base()
    t_fn, t_base = [], []
    for _ in range(reps):
        for f, acc in ((fn, t_fn), (base, t_base)):
            t0 = time.perf_counter()
            f()
            acc.append(time.perf_counter() - t0)
    return statistics.median(t_fn) * 1e3, statistics.median(t_base) * 1e3


def gbps(x: torch.Tensor, ms: float) -> float:
    """GB/s of one read and one write of x."""
    return 2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9


def peer_functions(fmt: str) -> Dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Fake-quant functions of other libraries for an MX format, where importable (best effort)."""
    peers: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}
    try:  # microxcaling
        from mx.mx_ops import quantize_mx_op
        specs = {"scale_bits": 8, "block_size": 32, "custom_cuda": False, "round": "even"}
        peers["microxcaling"] = lambda x: quantize_mx_op(x, specs, elem_format=fmt, axes=[-1])
    except Exception:
        pass
    try:  # torchao
        from torchao.prototype.mx_formats.mx_tensor import MXTensor
        elem = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}.get(fmt)
        if elem is not None:
            peers["torchao"] = lambda x: MXTensor.to_mx(x, elem, 32).to_dtype(x.dtype)
    except Exception:
        pass
    try:  # Brevitas
        import brevitas.nn as qnn
        from brevitas.quant.experimental.mx_quant_ocp import MXFloat8e4m3Act, MXInt8Act
        quant = {"fp8_e4m3": MXFloat8e4m3Act, "int8": MXInt8Act}.get(fmt)
        if quant is not None:
            ident = qnn.QuantIdentity(act_quant=quant, group_dim=-1, return_quant_tensor=False)
            ident.eval()
            peers["brevitas"] = lambda x: ident(x)
    except Exception:
        pass
    return peers


def run_table(size: int, reps: int, formats: List[str], compile_ref: bool, peers: bool, reference: bool = True) -> None:
    print("torch.set_flush_denormal(True)")
    torch.set_flush_denormal(True)
    header = (f"{'dtype':5} {'format':9} {'native ms':>9} {'GB/s':>6} {'clone ms':>8} {'x clone':>7} "
              + (f"{'ref ms':>8} {'x native':>8}" if reference else "")
              + (f" {'compiled ms':>11} {'x native':>8}" if compile_ref and reference else ""))
    for dname, dtype in DTYPES.items():
        x = torch.randn(size, size, generator=torch.Generator().manual_seed(0)).to(dtype)
        print(f"\n{header}")
        for fmt in formats:
            spec = row_spec(x, fmt)
            nat, clone_ms = paired_ms(lambda: native_fake_quant(x, spec), lambda: x.clone(), reps)
            line = f"{dname:5} {fmt:9} {nat:9.1f} {gbps(x, nat):6.2f} {clone_ms:8.1f} {nat / clone_ms:7.2f} "
            if reference:
                ref = median_ms(lambda: reference_fake_quant(x, spec), max(1, reps // 3))
                line += f"{ref:8.1f} {ref / nat:8.1f}"
            if compile_ref and reference:
                try:
                    torch._dynamo.reset()
                    compiled = torch.compile(lambda t, s=spec: reference_fake_quant(t, s)[0], fullgraph=True)
                    comp = median_ms(lambda: compiled(x), max(1, reps // 3))
                    line += f" {comp:11.1f} {comp / nat:8.1f}"
                except Exception as exc:  # dynamo may not trace every format's Python
                    line += f" {'failed':>11}  ({type(exc).__name__})"
            print(line, flush=True)
            if peers and fmt not in SCHEME_ROWS:
                for name, fn in peer_functions(fmt).items():
                    try:
                        ms = median_ms(lambda: fn(x), max(1, reps // 3))
                        print(f"{'':5} {'':9} {name}: {ms:.1f} ms ({ms / nat:.1f}x native)")
                    except Exception as exc:  # peers' APIs move; report, do not fail
                        print(f"{'':5} {'':9} {name}: failed ({type(exc).__name__}: {exc})")
    print("\ntorch.set_flush_denormal(False): native op and clone only")
    torch.set_flush_denormal(False)
    for dname, dtype in DTYPES.items():
        x = torch.randn(size, size, generator=torch.Generator().manual_seed(0)).to(dtype)
        cells = []
        for fmt in formats:
            spec = row_spec(x, fmt)
            nat, clone_ms = paired_ms(lambda: native_fake_quant(x, spec), lambda: x.clone(), reps)
            cells.append(f"{fmt} {nat:.1f} ms ({nat / clone_ms:.2f}x clone)")
        print(f"{dname}: " + "; ".join(cells))


def run_quantize_table(size: int, reps: int, formats: List[str]) -> None:
    """quantize (codes, scales: what packing and export store) along the last dim and along dim 0,
    each timed alternately with x.clone() (flush-to-zero off)."""
    torch.set_flush_denormal(False)
    print("\nquantize (codes + scales), native op: ms (x clone)")
    print(f"{'dtype':5} {'format':9} {'last dim':>17} {'dim 0':>17}")
    for dname, dtype in DTYPES.items():
        x = torch.randn(size, size, generator=torch.Generator().manual_seed(0)).to(dtype)
        for fmt in formats:
            cells = []
            for dim in (-1, 0):
                spec = row_spec(x, fmt, dim)
                ms, clone_ms = paired_ms(lambda: native_quantize(x, spec), lambda: x.clone(), reps)
                cells.append(f"{ms:7.1f} ({ms / clone_ms:5.2f}x)")
            print(f"{dname:5} {fmt:9} {cells[0]:>17} {cells[1]:>17}", flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4096, help="the tensor is size x size")
    parser.add_argument("--reps", type=int, default=9, help="timed calls per native measurement (reference: a third)")
    parser.add_argument("--formats", nargs="+", default=list(gq.MX_FORMATS) + list(SCHEME_ROWS),
                        help="MX format names and/or " + ", ".join(SCHEME_ROWS))
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile of the reference")
    parser.add_argument("--peers", action="store_true", help="also time Brevitas / torchao / microxcaling if importable")
    parser.add_argument("--quantize-only", action="store_true", help="only the quantize (codes + scales) table")
    parser.add_argument("--native-only", action="store_true", help="no reference (nor compiled reference) columns")
    add_save_argument(parser)
    args = parser.parse_args(argv)
    with saved_output(args.save, __file__, argv):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    """Print the header and the table of :func:`run_table` for the parsed arguments."""
    print(f"groupquant backend: {gq.ops.backend()}; torch {torch.__version__}; threads {torch.get_num_threads()}; "
          f"{args.size}x{args.size}, blocks of 32 (nvfp4: 16) along the last dim, median of {args.reps}")
    if args.peers:
        found = sorted({name for fmt in args.formats if fmt not in SCHEME_ROWS for name in peer_functions(fmt)})
        print("peers importable: " + (", ".join(found) if found else "none (brevitas, torchao, microxcaling)"))
    if not args.quantize_only:
        run_table(args.size, args.reps, args.formats, not args.no_compile, args.peers, not args.native_only)
    run_quantize_table(args.size, args.reps, args.formats)


if __name__ == "__main__":
    main()
