"""``formats`` and ``describe``: the element format, scale format and block scheme tables, and the
settings of one format, scheme or quantizer by name."""
from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional, Sequence

from ..formats import MX_FORMATS, get_format, get_scale_format, get_scheme, known_formats, known_schemes
from .arguments import _suggest

#: scale formats in the table: name -> what it is for
_TABLE_SCALES = (("e8m0", "power of two (OCP MX)"), ("e5m0", "power of two, e{k}m0 for k = 2..8"),
                 ("ue4m3", "unsigned FP8 E4M3 (NVFP4)"), ("bfloat16", "bfloat16 value"),
                 ("float32", "float32 value"))

_EXTRA_TABLE_FORMATS = ("float_ocp_e4m3", "float_fnuz_e4m3", "float_e4m3", "int4")


def format_table(names: Sequence[str]) -> str:
    """A text table of the named formats' derived constants (one row each, from ``describe()``)."""
    head = (f"{'name':<16} {'bits':>4} {'bits+scale':>10} {'bias':>4} {'emax':>4} {'max normal':>11} "
            f"{'min normal':>11} {'min subnorm':>11}  specials")
    rows = [head]
    for name in names:
        d = get_format(name).describe()
        min_normal = d.get("min_normal")
        rows.append(
            f"{name:<16} {d['bit_width']:>4} {d['bit_width'] + 8 / 32:>10.2f} {str(d.get('bias', '-')):>4} "
            f"{d['emax']:>4} {d['max_normal']:>11g} {('-' if min_normal is None else f'{min_normal:g}'):>11} "
            f"{d['min_subnormal']:>11g}  {d['specials']}")
    rows.append("bits+scale: storage per element with one 8-bit E8M0 scale per block of 32.")
    return "\n".join(rows)


def scale_format_table() -> str:
    """A text table of the scale formats: storage bits, smallest and largest scale, NaN code."""
    rows = [f"{'scale format':<13} {'bits':>4} {'min':>10} {'max':>12} {'NaN code':>8}  kind"]
    for name, kind in _TABLE_SCALES:
        d = get_scale_format(name).describe()
        lo, hi = d["min"], d["max"]
        lo = lo if isinstance(lo, str) else ("0 (->1)" if lo == 0 else f"{lo:g}")
        hi = hi if isinstance(hi, str) else f"{hi:g}"
        nan = d.get("nan_code")
        rows.append(f"{name:<13} {d['bit_width']:>4} {lo:>10} {hi:>12} {'-' if nan is None else hex(nan):>8}  {kind}")
    rows.append("min/max: the scale's range (minifloats: clamped to their normal range; float32 / bfloat16:\n"
                "a zero scale becomes 1). NaN code: the scale of a block holding NaN or Inf.")
    return "\n".join(rows)


def _mx_scheme_name(fmt: str) -> str:
    """The full 'mx...' alias of an MX format (mxfp4_e2m1 for fp4_e2m1), else its name."""
    names = [a for a in format_aliases().get(fmt, []) if a.startswith("mx")]
    return max(names, key=len) if names else fmt


def scheme_table() -> str:
    """A text table of the block schemes: each MX format (E8M0 scale per 32) and NVFP4, with bits per element."""
    rows = [f"{'scheme':<11} {'elements':<9} {'scale':<6} {'block':>5} {'tensor scale':>12} {'bits/element':>12}"]
    for fmt in MX_FORMATS:
        bits = get_format(fmt).bit_width + 8 / 32
        rows.append(f"{_mx_scheme_name(fmt):<11} {fmt:<9} {'e8m0':<6} {32:>5} {'-':>12} {bits:>12.2f}")
    for name in known_schemes():
        sc = get_scheme(name)
        rows.append(f"{name:<11} {sc.element.name:<9} {sc.scale_format.name:<6} {sc.block_size:>5} "
                    f"{'float32' if sc.tensor_scale else '-':>12} {sc.bits_per_element:>12.2f}")
    rows.append("bits/element: element bits + scale bits / block (a tensor scale adds 32 bits per tensor).\n"
                "fake_quant(x, 'nvfp4'); other combinations: fake_quant(x, fmt, block_size, scale_format=, tensor_scale=).")
    return "\n".join(rows)


def format_aliases() -> Dict[str, List[str]]:
    """Canonical format name -> the other names ``get_format`` accepts for the same format."""
    aliases: Dict[str, List[str]] = {}
    for name in known_formats():
        canonical = get_format(name).name
        aliases.setdefault(canonical, [])
        if name != canonical:
            aliases[canonical].append(name)
    return aliases


def cmd_formats(args: argparse.Namespace) -> int:
    """Print the format table (the MX formats and a few variants, or every format with --all), then
    the scale formats and the block schemes."""
    if args.all:
        aliases = format_aliases()
        print(format_table(sorted(aliases)))
        print("other names: " + "; ".join(f"{k} = {', '.join(v)}" for k, v in sorted(aliases.items()) if v))
    else:
        print(format_table(list(MX_FORMATS) + [n for n in _EXTRA_TABLE_FORMATS if n in known_formats()]))
    print()
    print(scale_format_table())
    print()
    print(scheme_table())
    return 0


def _find_quantizer(name: str) -> Optional[type]:
    """A quantizer class exported by ``groupquant.quantizers`` under ``name``, or None."""
    from .. import quantizers

    obj = getattr(quantizers, name, None) if name in quantizers.__all__ else None
    return obj if isinstance(obj, type) and issubclass(obj, quantizers.QuantizerBase) else None


def _quantizer_names() -> List[str]:
    """The names of the quantizer classes ``groupquant.quantizers`` exports."""
    from .. import quantizers

    return [name for name in quantizers.__all__ if _find_quantizer(name) is not None]


def cmd_describe(args: argparse.Namespace) -> int:
    """Print a format's constants or a quantizer's resolved settings."""
    name = args.name
    quantizer = _find_quantizer(name)
    if quantizer is not None:
        from ..quantizers import describe

        print(describe(quantizer))
        return 0
    scheme = get_scheme(name)
    if scheme is not None:
        rows = {"name": scheme.name, "elements": scheme.element.name, "scale_format": scheme.scale_format.name,
                "block_size": scheme.block_size, "tensor_scale": "float32 per tensor" if scheme.tensor_scale else "none",
                "bits_per_element": scheme.bits_per_element}
        for key, value in rows.items():
            print(f"{key:<20} {value}")
        return 0
    try:
        fmt = get_format(name)
    except ValueError:
        try:
            fmt = get_scale_format(name)
        except ValueError:
            guess = _suggest(name, known_formats() + known_schemes() + _quantizer_names())
            hint = f"; did you mean {guess!r}?" if guess else ""
            print(f"error: {name!r} is neither a format, a scale format, a scheme nor a quantizer in "
                  f"groupquant.quantizers{hint} (formats: python -m groupquant formats --all)", file=sys.stderr)
            return 2
    for key, value in fmt.describe().items():
        print(f"{key:<20} {value}")
    return 0
