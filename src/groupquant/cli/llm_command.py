"""``python -m groupquant llm MODEL --recipe NAME [...]``: quantize a causal language model, evaluate
it, generate from its packed weights, optionally save it, and print one table.

The sub-command's parser (:func:`add_llm_parser`, registered by :mod:`groupquant.cli.entry`) resolves
the arguments once into :class:`groupquant.llm.LlmOptions`; the workflow is
:func:`groupquant.llm.run_llm`. Bad input (an unknown model, recipe or method, ``--format``
without ``--save``, a text too short for one window, a model folder without a tokenizer, a GGUF
file that is damaged or has no tokenizer, ``--save`` onto a file, a ``--format`` that cannot hold
the recipe's weights or the rotation of ``--methods``, an empty ``--generate`` prompt) is one
``error:`` line and exit status 2, checked before the model is loaded where it can be.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence, Tuple

from ..inject import closest

__all__ = ["add_llm_parser", "cmd_llm", "parse_methods", "METHOD_WORDS"]

#: ``--methods`` words besides the method names: ``rtn`` / ``none`` round to nearest (no
#: calibration, the default), ``default`` the recipe's default methods of ``groupquant.ptq``
METHOD_WORDS = ("rtn", "none", "default")


def _method_names() -> Tuple[str, ...]:
    from ..calib.methods import ORDER

    return ORDER


def parse_methods(values: Sequence[str]) -> Optional[Tuple[str, ...]]:
    """``--methods`` words (space or comma separated) as :attr:`LlmOptions.methods`: None for
    ``rtn`` / ``none``, ``()`` for ``default``, else the method names in the order given.
    ``argparse.ArgumentTypeError`` with a did-you-mean for an unknown word or a mix of a word
    and names."""
    words = [w.strip() for item in values for w in item.split(",") if w.strip()]
    names = _method_names()
    known = METHOD_WORDS + names
    for word in words:
        if word not in known:
            match = closest(word, known)
            hint = f"did you mean {match!r}? " if match else ""
            raise argparse.ArgumentTypeError(f"unknown calibration method {word!r}; {hint}choose {', '.join(names)} "
                                             f"(any of them), or one of {', '.join(METHOD_WORDS)}")
    if not words:
        raise argparse.ArgumentTypeError(f"names no method; choose {', '.join(names)}, or one of "
                                         f"{', '.join(METHOD_WORDS)}")
    special = [w for w in words if w in METHOD_WORDS]
    if special and len(words) > 1:
        raise argparse.ArgumentTypeError(f"{special[0]!r} stands alone; got {' '.join(words)}")
    if special:
        return None if special[0] in ("rtn", "none") else ()
    return tuple(dict.fromkeys(words))


class _MethodsAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        try:
            setattr(namespace, self.dest, parse_methods(values))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None


class _ModelSourceAction(argparse.Action):
    """Stores MODEL as a :class:`groupquant.llm.ModelSource` (nothing loaded yet)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from ..llm import resolve_model_source

        try:
            setattr(namespace, self.dest, resolve_model_source(values))
        except ValueError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None


def _int_at_least(low: int, why: str = ""):
    """An argparse type: an integer >= ``low`` (``why`` says why, in the error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}{why}, got {value}")
        return value
    parse.__name__ = "int"
    return parse


_positive_int = _int_at_least(1)


def add_llm_parser(sub: argparse._SubParsersAction, *, recipe_action: type, recipe_names: List[str]) -> None:
    """Register ``llm`` on the sub-command parsers ``sub`` (``recipe_action``: the CLI's checked
    ``--recipe`` action, with a did-you-mean)."""
    from ..llm.models import KNOWN_MODELS
    from ..llm.run import DEFAULT_PROMPT, SAVE_FORMATS

    p = sub.add_parser("llm", help="quantize a causal language model, evaluate, generate, save (needs the llm extra)",
                       description="Quantize a causal LM (output head kept in float), pack it, measure perplexity "
                                   "and tokens per second against float, optionally save a checkpoint. Nothing is "
                                   "downloaded.")
    p.add_argument("model", action=_ModelSourceAction, metavar="MODEL",
                   help="a Hugging Face model folder, a .gguf file, or a name: "
                        + "; ".join(f"{k} ({v})" for k, v in KNOWN_MODELS.items()))
    p.add_argument("--recipe", action=recipe_action, required=True, metavar="NAME",
                   help="the quantization recipe: " + ", ".join(recipe_names))
    p.add_argument("--methods", nargs="+", action=_MethodsAction, default=None, metavar="METHOD",
                   help="calibration with groupquant.ptq: 'default' (the recipe's default methods) or names from "
                        f"{', '.join(_method_names())}; 'rtn' (the default) rounds to nearest without calibration")
    p.add_argument("--eval", dest="eval_path", metavar="TEXTFILE", default=None,
                   help="evaluation (and calibration) text, documents separated by blank lines "
                        "(default: Python's own docstrings)")
    p.add_argument("--seq-len", type=_int_at_least(2, " (a window predicts each token from the ones before it)"),
                   default=None,
                   help="tokens per window (default: 512, or the model's context if shorter)")
    p.add_argument("--eval-tokens", type=_positive_int, default=4096, help="evaluation tokens (default 4096)")
    p.add_argument("--calibration-tokens", type=_positive_int, default=2048,
                   help="calibration tokens, with --methods (default 2048)")
    p.add_argument("--save", dest="save_dir", metavar="DIR", default=None, help="write the packed model to DIR")
    p.add_argument("--format", dest="save_format", choices=SAVE_FORMATS, default=None,
                   help="checkpoint format with --save (default safetensors)")
    p.add_argument("--generate", dest="prompt", metavar="PROMPT", default=None,
                   help=f"print a greedy continuation of PROMPT from each model (tokens/s are timed on "
                        f"{DEFAULT_PROMPT!r} otherwise)")
    p.add_argument("--max-new-tokens", type=_positive_int, default=32, help="tokens to generate (default 32)")
    p.add_argument("--functional", action="store_true",
                   help="also quantize the functional GEMMs (attention's matmuls) by the recipe; default: only the "
                        "linear layers, as docs/calibration.md measures")
    p.add_argument("--calibration-report", action="store_true", help="print ptq's per-layer report")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.set_defaults(func=cmd_llm)


def cmd_llm(args: argparse.Namespace) -> int:
    """Run the workflow of :func:`groupquant.llm.run_llm` and print its table; 2 on bad input."""
    from ..llm import LlmInputError, LlmOptions, format_report, run_llm

    if args.save_format is not None and args.save_dir is None:
        print("error: --format needs --save DIR (the folder to write the checkpoint to)", file=sys.stderr)
        return 2
    if args.eval_path is not None and not os.path.isfile(args.eval_path):
        print(f"error: --eval {args.eval_path!r}: no such file (a UTF-8 text, documents separated by blank lines)",
              file=sys.stderr)
        return 2
    options = LlmOptions(source=args.model, recipe=args.recipe, methods=args.methods, eval_path=args.eval_path,
                         seq_len=args.seq_len, eval_tokens=args.eval_tokens,
                         calibration_tokens=args.calibration_tokens, save_dir=args.save_dir,
                         save_format=args.save_format or "safetensors", prompt=args.prompt,
                         max_new_tokens=args.max_new_tokens, progress=not args.no_progress,
                         calibration_report=args.calibration_report, functional=args.functional)
    try:
        result = run_llm(options)
    except (LlmInputError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_report(result.rows))
    if args.prompt is not None:
        for label, gen in result.generations.items():
            print(f"[{label}] {args.prompt}{gen.text}")
    return 0
