"""``demo``: train on scikit-learn's digits, quantize to every MX format, QAT (the package's main
job, :mod:`groupquant.demo`); with ``--recipe``, train with an MX training recipe and compare with float."""
from __future__ import annotations

import argparse
import sys

import torch

#: QAT epochs of the demo when ``--qat-epochs`` is not given (0 with ``--recipe``).
_QAT_EPOCHS = 4


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the main job and print its table (or JSON)."""
    from ..demo import DemoOptions, format_report, report_to_json, require_demo_packages, run_demo

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
    from ..ops import backend

    backend()  # build the native kernels now (once per install, one printed line), not in the middle of a progress bar
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model is tiny: more threads only add overhead (and stall on busy machines)
    try:
        report = run_demo(options)
    finally:
        torch.set_num_threads(threads)
    print(report_to_json(report) if args.json else format_report(report))
    return 0
