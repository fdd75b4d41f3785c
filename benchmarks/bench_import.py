"""Import time: ``python -c "import groupquant"`` against ``python -c "import torch"``.

Each command runs in a fresh interpreter, alternately, ``--reps`` times; the medians and their
ratio are printed (target: ``import groupquant`` within 1.3x of ``import torch``). Also times
``python -m groupquant --help``. On a busy machine the wall times swing; the second table reads
``python -X importtime -c "import groupquant"``, where torch's and groupquant's cumulative import
times come from the same process, so their ratio holds steady. Run from the checkout root::

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


def importtime_seconds(env: Dict[str, str]) -> Dict[str, float]:
    """Cumulative import time in seconds of ``torch`` and of ``groupquant``, from one
    ``python -X importtime -c "import groupquant"`` (torch is imported inside groupquant's import)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import groupquant"], env=env, check=True,
                          capture_output=True, text=True)
    found: Dict[str, float] = {}
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() in ("torch", "groupquant") and parts[1].strip().isdigit():
            found.setdefault(parts[2].strip(), int(parts[1]) / 1e6)
    return found


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
    print()
    print("python -X importtime -c 'import groupquant' (cumulative, same process)")
    print(f"{'run':<5} {'torch s':>8} {'groupquant s':>13} {'x torch':>8}")
    for run in range(args.reps):
        t = importtime_seconds(env)
        print(f"{run:<5} {t['torch']:8.3f} {t['groupquant']:13.3f} {t['groupquant'] / t['torch']:8.2f}")


if __name__ == "__main__":
    main()
