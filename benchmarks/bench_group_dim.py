"""Speed of grouping along a leading or middle dim (dim=0 of [N, N], dim=1 of [B, T, C]) vs the last dim.

Run by hand (from the repository root):

    PYTHONPATH=src python benchmarks/bench_group_dim.py                  # all MX formats, fp32 and bf16
    PYTHONPATH=src python benchmarks/bench_group_dim.py --threads 2 --ops fake_quant quantize

Training GEMMs group some operands along dim 0 (dY along tokens for dW = dY^T x); the native
kernels must be about as fast there as along the last dim. For every shape, dtype, MX format, op
(fake_quant, fake_quant_with_scale, quantize) and grouped dim it prints the median time (ms) of
the public entry point and its ratio to the same call with dim=-1 and to x.clone() (the memory
floor, one read and one write of x), each pair timed alternately so that load from other processes
hits both alike. Measured with torch.set_flush_denormal(True) (the kernels keep subnormals
regardless: they clear the flush mode while they run).
"""
from __future__ import annotations

import argparse
from typing import List, Optional, Sequence, Tuple

import torch

import groupquant as gq
from bench_fake_quant import paired_ms  # the same paired timing (this folder is on sys.path when run as a script)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
OPS = {
    "fake_quant": lambda x, fmt, dim: gq.fake_quant(x, fmt, 32, dim=dim),
    "with_scale": lambda x, fmt, dim: gq.ops.fake_quant_with_scale(x, fmt, 32, dim=dim),
    "quantize": lambda x, fmt, dim: gq.quantize(x, fmt, 32, dim=dim),
}
# (shape, grouped dims to time against dim=-1)
SHAPES: List[Tuple[Tuple[int, ...], Tuple[int, ...]]] = [((4096, 4096), (0,)), ((8, 2048, 1024), (1,))]


def run(shapes: Sequence[Tuple[Tuple[int, ...], Tuple[int, ...]]], dtypes: Sequence[str], formats: Sequence[str],
        ops: Sequence[str], reps: int) -> None:
    print(f"{'shape':>16} {'dtype':5} {'op':10} {'format':9} {'dim':>3} {'ms':>7} {'dim=-1 ms':>9} "
          f"{'x dim-1':>7} {'clone ms':>8} {'x clone':>7}")
    for shape, dims in shapes:
        for dname in dtypes:
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(DTYPES[dname])
            for op in ops:
                call = OPS[op]
                for fmt in formats:
                    for dim in dims:
                        ms, last_ms = paired_ms(lambda: call(x, fmt, dim), lambda: call(x, fmt, -1), reps)
                        _, clone_ms = paired_ms(lambda: call(x, fmt, dim), lambda: x.clone(), max(3, reps // 2))
                        print(f"{'x'.join(map(str, shape)):>16} {dname:5} {op:10} {fmt:9} {dim:>3} {ms:7.1f} "
                              f"{last_ms:9.1f} {ms / last_ms:7.2f} {clone_ms:8.1f} {ms / clone_ms:7.2f}", flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--reps", type=int, default=7, help="timed calls per measurement (median)")
    parser.add_argument("--formats", nargs="+", default=list(gq.MX_FORMATS))
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    parser.add_argument("--square-only", action="store_true", help="only the 4096x4096 dim=0 case")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    shapes = SHAPES[:1] if args.square_only else SHAPES
    print(f"groupquant backend: {gq.ops.backend()}; torch {torch.__version__}; threads {torch.get_num_threads()}; "
          f"blocks of 32; median of {args.reps}; torch.set_flush_denormal(True)")
    run(shapes, args.dtypes, args.formats, args.ops, args.reps)


if __name__ == "__main__":
    main()
