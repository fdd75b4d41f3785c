"""Import time: ``python -c "import groupquant"`` against ``python -c "import torch"``.

Each command runs in a fresh interpreter, alternately, ``--reps`` times; the medians and their
ratio are printed (target: ``import groupquant`` within 1.3x of ``import torch``). Also times
``python -m groupquant --help``. Run from the checkout root::

    PYTHONPATH=src python benchmarks/bench_import.py --reps 7
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

SRC = str(Path(__file__).resolve().parents[1] / "src")

COMMANDS = {
    "import torch": [sys.executable, "-c", "import torch"],
    "import groupquant": [sys.executable, "-c", "import groupquant"],
    "python -m groupquant --help": [sys.executable, "-m", "groupquant", "--help"],
}


def _seconds(command: List[str], env: Dict[str, str]) -> float:
    """Wall time in seconds of one run of ``command`` (output discarded)."""
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: List[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="runs of each command (alternating)")
    parser.add_argument("--src", default=SRC, help="the groupquant sources to import (default: this checkout's)")
    args = parser.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=args.src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for command in COMMANDS.values():  # warm the file cache once
        _seconds(command, env)
    times: Dict[str, List[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.reps):
        for name, command in COMMANDS.items():
            times[name].append(_seconds(command, env))
    base = statistics.median(times["import torch"])
    print(f"python {sys.version.split()[0]}; groupquant from {args.src}; median of {args.reps} fresh interpreters, "
          "run alternately")
    print(f"{'command':<30} {'median s':>9} {'min s':>7} {'x torch':>8}")
    for name, runs in times.items():
        print(f"{name:<30} {statistics.median(runs):9.3f} {min(runs):7.3f} {statistics.median(runs) / base:8.2f}")


if __name__ == "__main__":
    main()
