"""The command line, ``python -m groupquant COMMAND``.

Commands (``build_parser`` holds their help, which ``--help`` prints once):
    demo      the main job: train on scikit-learn's digits, quantize to every MX format, QAT (default);
              with --recipe, train with an MX training recipe and compare with float
    formats   the element format table (bits, bias, emax, max normal, min normal/subnormal, specials),
              the scale format table and the block schemes (MX formats, NVFP4) with bits per element
    describe  the settings of a format or a quantizer, by name
    llm       quantize a causal language model, evaluate, generate from packed weights, save
              (:mod:`groupquant.llm_cli`; the llm extra)
"""
from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional, Sequence

import torch

from .formats import MX_FORMATS, get_format, get_scale_format, get_scheme, known_formats, known_schemes
from .inject import closest
from .quantizers import BLOCK_FORMATS

__all__ = ["main", "build_parser", "format_table", "format_aliases", "scale_format_table", "scheme_table"]

#: scale formats in the table: name -> what it is for
_TABLE_SCALES = (("e8m0", "power of two (OCP MX)"), ("e5m0", "power of two, e{k}m0 for k = 2..8"),
                 ("ue4m3", "unsigned FP8 E4M3 (NVFP4)"), ("bfloat16", "bfloat16 value"),
                 ("float32", "float32 value"))

_EXTRA_TABLE_FORMATS = ("float_ocp_e4m3", "float_fnuz_e4m3", "float_e4m3", "int4")


def _mx_format_names() -> Dict[str, str]:
    """Every name ``get_format`` accepts for an MX element format -> its canonical name, and the
    block schemes (``nvfp4``) -> themselves."""
    names = {name: get_format(name).name for name in known_formats() if get_format(name).name in MX_FORMATS}
    names.update({name: name for name in known_schemes()})
    return names


def _split_formats(values: Sequence[str]) -> List[str]:
    """``['fp4_e2m1,int8', 'nvfp4']`` -> the canonical block format names, in order, each once.

    Raises ``argparse.ArgumentTypeError`` naming the first name that is not an MX format or a
    scheme, or saying that no name was given; both messages list the valid names.
    """
    mx_names = _mx_format_names()
    valid = (f"MX formats: {', '.join(MX_FORMATS)}; schemes: {', '.join(known_schemes())} "
             f"(also: {', '.join(sorted(n for n in mx_names if n not in MX_FORMATS and n not in known_schemes()))})")
    names: List[str] = []
    for name in (v.strip() for item in values for v in item.split(",")):
        if not name:
            continue
        canonical = mx_names.get(name.lower())
        if canonical is None:
            if name.lower() in known_formats():
                raise argparse.ArgumentTypeError(f"{name!r} is not an MX element format; {valid}")
            guess = _suggest(name, list(mx_names))
            hint = f" (did you mean {guess!r}?)" if guess else ""
            raise argparse.ArgumentTypeError(f"unknown format {name!r}{hint}; {valid}")
        if canonical not in names:
            names.append(canonical)
    if not names:
        raise argparse.ArgumentTypeError(f"names no format; {valid}")
    return names


class _FormatsAction(argparse.Action):
    """Stores ``--formats`` as checked canonical names (and ``formats_given``); a bad list is a
    usage error (exit 2)."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            setattr(namespace, self.dest, _split_formats(values))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        namespace.formats_given = True


def _recipe_names() -> List[str]:
    from .nn import RECIPES

    return list(RECIPES)


class _RecipeAction(argparse.Action):
    """Stores ``--recipe`` as a recipe name; an unknown one is a usage error (exit 2) with a
    did-you-mean and the list of recipes."""

    def __call__(self, parser, namespace, values, option_string=None):
        from .inject import UnknownSettingError
        from .nn import recipe

        try:
            setattr(namespace, self.dest, recipe(values.strip()).name)
        except UnknownSettingError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None


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
    from . import quantizers

    obj = getattr(quantizers, name, None) if name in quantizers.__all__ else None
    return obj if isinstance(obj, type) and issubclass(obj, quantizers.QuantizerBase) else None


def _quantizer_names() -> List[str]:
    """The names of the quantizer classes ``groupquant.quantizers`` exports."""
    from . import quantizers

    return [name for name in quantizers.__all__ if _find_quantizer(name) is not None]


def _suggest(name: str, candidates: Sequence[str]) -> Optional[str]:
    """The candidate closest to ``name`` (case-insensitive), or None when none is close."""
    by_key = {c.lower(): c for c in candidates}
    match = closest(name.strip().lower(), by_key)
    return by_key[match] if match is not None else None


def cmd_describe(args: argparse.Namespace) -> int:
    """Print a format's constants or a quantizer's resolved settings."""
    name = args.name
    quantizer = _find_quantizer(name)
    if quantizer is not None:
        from .quantizers import describe

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


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the main job and print its table (or JSON)."""
    from .demo import DemoOptions, format_report, report_to_json, require_demo_packages, run_demo

    try:
        require_demo_packages()
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    recipe_only = args.recipe is not None  # the recipe run alone, unless PTQ formats or QAT epochs are asked for
    formats = () if recipe_only and not args.formats_given else tuple(args.formats)
    qat_epochs = args.qat_epochs if args.qat_epochs is not None else (0 if recipe_only else _QAT_EPOCHS)
    options = DemoOptions(formats=formats, float_epochs=args.epochs, qat_epochs=qat_epochs, seed=args.seed,
                          progress=not (args.json or args.no_progress), recipe=args.recipe)
    from .ops import backend

    backend()  # build the native kernels now (once per install, one printed line), not in the middle of a progress bar
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model is tiny: more threads only add overhead (and stall on busy machines)
    try:
        report = run_demo(options)
    finally:
        torch.set_num_threads(threads)
    print(report_to_json(report) if args.json else format_report(report))
    return 0


_QAT_EPOCHS = 4


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


#: The seeds the demo can use: torch seeds are 64-bit, and the QAT run takes ``seed + 1``.
_SEED_MAX = 2**64 - 2


def _seed(text: str) -> int:
    """A demo seed: an integer in [0, 2**64 - 2] (argparse reports anything else in one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= _SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**64 - 2] (torch seeds are 64-bit), got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with its four sub-commands (the demo runs when none is named)."""
    parser = argparse.ArgumentParser(
        prog="python -m groupquant",
        description="Group-wise (OCP Microscaling) quantization: the demo and the format tables.",
        epilog="Without a command (or with only options) the demo runs. "
               "Help of one command: python -m groupquant COMMAND --help")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    demo = sub.add_parser("demo", help="train on digits, quantize to every MX format, QAT MXFP4 (default)")
    demo.add_argument("--formats", nargs="+", default=list(BLOCK_FORMATS), metavar="FMT", action=_FormatsAction,
                      help=f"formats to compare, space or comma separated (default: {','.join(MX_FORMATS)})")
    demo.add_argument("--epochs", type=_non_negative_int, default=15,
                      help="float training epochs, and the --recipe run's (default 15)")
    demo.add_argument("--qat-epochs", type=_non_negative_int, default=None,
                      help=f"QAT fine-tuning epochs for MXFP4, 0 to skip (default {_QAT_EPOCHS}; 0 with --recipe)")
    demo.add_argument("--recipe", action=_RecipeAction, metavar="NAME", default=None,
                      help="train with an MX training recipe (every operand of the forward and both backward "
                           "GEMMs quantized) from the float model's initial weights, from scratch with the same "
                           "epochs, learning rate and batch order, so that every training step runs on the "
                           "recipe's GEMMs; then compare with float: test accuracy and loss, final training loss, "
                           "gradient SQNR at init. Skips the PTQ table and QAT unless --formats / --qat-epochs "
                           "are given. NAME: " + ", ".join(_recipe_names()))
    demo.add_argument("--seed", type=_seed, default=0, help="data split, initialization and batch order (default 0)")
    demo.add_argument("--json", action="store_true", help="print the results as JSON (no progress bars)")
    demo.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    demo.set_defaults(func=cmd_demo, formats_given=False)
    fmts = sub.add_parser("formats", help="print the element, scale format and block scheme tables")
    fmts.add_argument("--all", action="store_true", help="every format name groupquant knows")
    fmts.set_defaults(func=cmd_formats)
    desc = sub.add_parser("describe", help="settings of a format or quantizer, e.g. describe fp4_e2m1")
    desc.add_argument("name", help="a format name or a quantizer class in groupquant.quantizers")
    desc.set_defaults(func=cmd_describe)
    from .llm_cli import add_llm_parser

    add_llm_parser(sub, recipe_action=_RecipeAction, recipe_names=_recipe_names())
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["demo", *argv]
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:
        from .ops.native import BackendSettingError  # imported here: the CLI starts without ops

        if not isinstance(err, BackendSettingError):
            raise
        print(f"error: {err}", file=sys.stderr)  # a bad GROUPQUANT_BACKEND: one line, not a traceback
        return 2
