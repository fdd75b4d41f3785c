"""Result files of the benchmarks: ``--save NAME`` writes a run's printed table to
``benchmarks/results/NAME.md`` with the command that made it, and ``docs/make_figures.py`` copies
each file into the region ``<!-- figures:bench-NAME -->`` of docs/benchmarks.md.

A result file is markdown: a ``Command: `...``` line (the environment variables that change the
numbers, then the command as run from the checkout root), a line saying when and where it ran, and
the printed output as a fenced ``text`` block. A file seeded from a figure that was in the docs
before the benchmark could save says so in place of the when-and-where line.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

RESULTS = Path(__file__).resolve().parent / "results"
#: environment variables that change a benchmark's numbers, written before the command when set
_ENV_NAMES = ("OMP_NUM_THREADS", "GROUPQUANT_BACKEND", "GROUPQUANT_CPU_PATH")


def add_save_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--save NAME`` (write the printed output to ``benchmarks/results/NAME.md``)."""
    parser.add_argument("--save", metavar="NAME", default=None,
                        help="also write the printed output to benchmarks/results/NAME.md, which "
                             "docs/make_figures.py copies into docs/benchmarks.md")


def command_line(argv: Sequence[str], script: str) -> str:
    """The command that reruns this benchmark from the checkout root, without ``--save NAME``."""
    kept: List[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--save":
            skip = True
            continue
        if arg.startswith("--save="):
            continue
        kept.append(arg)
    env = [f"{name}={os.environ[name]}" for name in _ENV_NAMES if name in os.environ]
    return " ".join([*env, "PYTHONPATH=src", "python", f"benchmarks/{Path(script).name}", *map(shlex.quote, kept)])


def result_text(command: str, where: str, output: str) -> str:
    """The content of a result file (see the module docstring)."""
    return f"Command: `{command}`\n\n{where}\n\n```text\n{output.rstrip()}\n```\n"


def _where() -> str:
    """When (UTC, to the minute) and on what the run happened: torch, CPU capability, machine, CPUs."""
    import torch

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"Run {when}: torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, "
            f"{platform.machine()}, {os.cpu_count()} CPUs.")


class _Tee(io.TextIOBase):
    """Writes to the real stdout and keeps a copy."""

    def __init__(self, out) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


@contextlib.contextmanager
def saved_output(name: Optional[str], script: str, argv: Optional[Sequence[str]] = None) -> Iterator[None]:
    """Print as usual; with a ``name``, also write what was printed to ``benchmarks/results/NAME.md``
    when the body finishes without an error."""
    if name is None:
        yield
        return
    if not name.replace("-", "").replace("_", "").isalnum():
        raise SystemExit(f"--save: NAME is a file name of letters, digits, '-' and '_', got {name!r}")
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield
    RESULTS.mkdir(exist_ok=True)
    command = command_line(list(sys.argv[1:] if argv is None else argv), script)
    (RESULTS / f"{name}.md").write_text(result_text(command, _where(), tee.kept.getvalue()), encoding="utf-8")
    print(f"wrote benchmarks/results/{name}.md (python docs/make_figures.py --fast copies it into docs/benchmarks.md)")
