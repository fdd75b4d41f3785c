"""Command line: ``python -m groupquant [demo|formats]`` (``demo`` is the default)."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import torch

from . import MX_FORMATS, fake_quant, get_format, known_formats


def _sqnr_db(x: torch.Tensor, y: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio in dB."""
    noise = (x - y).double().pow(2).sum()
    return float(10 * torch.log10(x.double().pow(2).sum() / noise))


def cmd_demo(args: argparse.Namespace) -> int:
    """Quantize a fixed random tensor with every MX format and print the error table."""
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(256, 1024, generator=gen)
    print(f"{'format':<10} {'bits/elem':>9} {'SQNR dB':>8} {'max abs err':>12}")
    for name in MX_FORMATS:
        y = fake_quant(x, name)
        bits = get_format(name).bit_width + 8 / 32
        print(f"{name:<10} {bits:>9.2f} {_sqnr_db(x, y):>8.2f} {float((x - y).abs().max()):>12.5f}")
    return 0


def cmd_formats(args: argparse.Namespace) -> int:
    """Print the element format table."""
    names = MX_FORMATS + [n for n in ("float_ocp_e4m3", "float_fnuz_e4m3", "float_e4m3") if n in known_formats()]
    print(f"{'name':<16} {'bits':>4} {'bias':>4} {'emax':>4} {'max normal':>11} {'min normal':>11} {'min subn.':>10} specials")
    for name in names:
        d = get_format(name).describe()
        mn = d.get("min_normal")
        print(f"{name:<16} {d['bit_width']:>4} {str(d.get('bias', '-')):>4} {d['emax']:>4} {d['max_normal']:>11g} "
              f"{(mn if mn is not None else float('nan')):>11g} {d['min_subnormal']:>10g} {d['specials']}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m groupquant", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="quantize a fixed tensor with every MX format (default)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=cmd_demo)
    fmts = sub.add_parser("formats", help="print the element format table")
    fmts.set_defaults(func=cmd_formats)
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["demo"] + list(argv or []))
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
