"""Write the generated figures of README.md and docs/*.md into their marked regions.

A region is ``<!-- figures:NAME -->`` ... ``<!-- /figures:NAME -->``; what is between the two
markers is replaced by what generator NAME produces, so figures in the docs come from a run, not
from copying. Generators:

- ``output`` (fast): the stdout of the python block just above the region in the same file, run on
  its own (a fresh namespace, in a temporary directory);
- ``formats`` (fast): the tables of ``python -m groupquant formats``;
- ``demo-output`` (slow: trains, a minute or so): ``python -m groupquant demo --no-progress``;
- ``test-suite`` (slow: the whole suite, minutes): the summary line of ``python -m pytest -q``;
- ``bench-NAME`` (fast: copies a file): ``benchmarks/results/NAME.md``, the table a benchmark wrote
  with ``--save NAME`` and the command that made it (docs/benchmarks.md holds these regions; other
  pages link there). A benchmark is never rerun here: rerun it with ``--save NAME``, then this.

Usage, from the checkout root::

    PYTHONPATH=src python docs/make_figures.py            # every region
    PYTHONPATH=src python docs/make_figures.py --fast     # the fast ones only
    PYTHONPATH=src python docs/make_figures.py --check    # write nothing; exit 1 naming stale regions
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REGION = re.compile(r"<!-- figures:(?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- /figures:(?P=name) -->", re.S)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Generator:
    """How one kind of region is filled: ``make(text, start)`` gets the page's text and the
    region's offset in it and returns the region's new body; ``slow`` ones train or run tests."""
    make: Callable[[str, int], str]
    slow: bool


def _fenced(text: str, language: str = "text") -> str:
    """``text`` as a fenced block, with a trailing newline."""
    return f"```{language}\n{text.rstrip()}\n```\n"


def _env() -> Dict[str, str]:
    """The environment for subprocesses: this checkout's sources first on the path."""
    src = str(ROOT / "src")
    return dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


@contextlib.contextmanager
def _working_directory(path: str) -> Iterator[None]:
    """Run the body in ``path`` (contextlib.chdir is Python 3.11+; this project supports 3.10)."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def block_output(text: str, start: int) -> str:
    """Stdout of the last python block before offset ``start`` of ``text``, run on its own."""
    blocks = [m.group(1) for m in PYTHON_BLOCK.finditer(text[:start])]
    if not blocks:
        raise ValueError("an 'output' region must follow a ```python block")
    out = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp, _working_directory(tmp), contextlib.redirect_stdout(out):
        exec(compile(blocks[-1], "<docs block>", "exec"), {"__name__": "__docs__"})
    return _fenced(out.getvalue())


def formats_tables(_text: str, _start: int) -> str:
    """The output of ``python -m groupquant formats``."""
    from groupquant.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["formats"])
    return _fenced(out.getvalue())


def demo_output(_text: str, _start: int) -> str:
    """The output of ``python -m groupquant demo --no-progress``, and the machine it ran on."""
    done = subprocess.run([sys.executable, "-m", "groupquant", "demo", "--no-progress"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, check=True)
    import torch

    where = (f"(run by docs/make_figures.py: torch {torch.__version__}, "
             f"{torch.backends.cpu.get_cpu_capability()}, {platform.machine()}, {os.cpu_count()} CPUs)")
    return _fenced(done.stdout) + "\n" + where + "\n"


def test_suite(_text: str, _start: int) -> str:
    """The summary line of the whole test suite, one thread per op."""
    env = dict(_env(), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    summary = [line for line in done.stdout.splitlines() if re.search(r"\d+ passed", line)]
    if not summary:
        raise RuntimeError(f"no pytest summary line (exit {done.returncode}):\n{done.stdout[-2000:]}")
    return _fenced(summary[-1].strip("= "))


BENCH_RESULTS = ROOT / "benchmarks" / "results"
BENCH_PREFIX = "bench-"


def bench_result(name: str) -> Generator:
    """The generator of region ``bench-NAME``: the text of ``benchmarks/results/NAME.md``."""
    path = BENCH_RESULTS / f"{name}.md"

    def make(_text: str, _start: int) -> str:
        if not path.is_file():
            raise ValueError(f"region bench-{name}: no result file {os.path.relpath(path, ROOT)} "
                             f"(write it with the benchmark's --save {name})")
        return path.read_text(encoding="utf-8")

    return Generator(make, slow=False)


GENERATORS: Dict[str, Generator] = {
    "output": Generator(block_output, slow=False),
    "formats": Generator(formats_tables, slow=False),
    "demo-output": Generator(demo_output, slow=True),
    "test-suite": Generator(test_suite, slow=True),
}


def generator_of(name: str) -> Generator:
    """The generator of region ``name``: one of :data:`GENERATORS`, or ``bench-NAME``'s file copy."""
    if name in GENERATORS:
        return GENERATORS[name]
    if name.startswith(BENCH_PREFIX):
        return bench_result(name[len(BENCH_PREFIX):])
    raise ValueError(f"unknown figures region {name!r}; known: {sorted(GENERATORS)} and {BENCH_PREFIX}NAME "
                     f"(a file of benchmarks/results/)")


def render(text: str, fast_only: bool = False, only: Optional[Sequence[str]] = None) -> str:
    """``text`` with every region (the fast ones, or those whose kind is named in ``only``:
    a generator's name, or ``bench`` for every ``bench-NAME``) regenerated."""
    for name in {m.group("name") for m in REGION.finditer(text)}:
        generator_of(name)
    pieces: List[str] = []
    last = 0
    for match in REGION.finditer(text):
        name = match.group("name")
        generator = generator_of(name)
        kind = "bench" if name.startswith(BENCH_PREFIX) and name not in GENERATORS else name
        body = match.group("body")
        if not (fast_only and generator.slow) and (only is None or kind in only):
            body = generator.make(text, match.start())
        pieces.append(text[last:match.start("body")] + body)
        last = match.end("body")
    return "".join(pieces) + text[last:]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="only the regions that need no training or test run")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a region is out of date")
    parser.add_argument("--only", nargs="+", choices=sorted(GENERATORS) + ["bench"],
                        help="only these kinds of region (bench: every bench-NAME)")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        text = page.read_text()
        new = render(text, fast_only=args.fast, only=args.only)
        if new != text:
            stale.append(str(page.relative_to(ROOT)))
            if not args.check:
                page.write_text(new)
    verb = "out of date" if args.check else "rewritten"
    print(f"{verb}: {', '.join(stale) if stale else 'none'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
