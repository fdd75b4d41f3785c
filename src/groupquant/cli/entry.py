"""The parser of ``python -m groupquant`` and its entry, :func:`main` (the commands live beside it:
``tables.py`` formats / describe, ``demo_command.py`` demo, ``llm_command.py`` llm)."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ..formats import MX_FORMATS
from ..quantizers import BLOCK_FORMATS
from .arguments import _FormatsAction, _non_negative_int, _recipe_names, _RecipeAction, _seed
from .demo_command import _QAT_EPOCHS, cmd_demo
from .llm_command import add_llm_parser
from .tables import cmd_describe, cmd_formats


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
        from ..ops.native import BackendSettingError  # imported here: the CLI starts without ops

        if not isinstance(err, BackendSettingError):
            raise
        print(f"error: {err}", file=sys.stderr)  # a bad GROUPQUANT_BACKEND: one line, not a traceback
        return 2
