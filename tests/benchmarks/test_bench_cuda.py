"""The GPU benchmarks run where CI has no GPU: ``bench_cuda.py`` end to end on the CPU (its
``--device cpu`` smoke run, on the host's clock), and ``cuda_memory_peak.py``'s replay of an
allocator trace built by hand. A lent GPU machine has minutes, not hours: a script that breaks
there costs a session its figures (the device tool's torch is 2.11, which the oldest-torch run of
the suite is: the smoke test's name puts it in that run)."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, List

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # (a dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module


def _table(text: str, title: str) -> List[List[str]]:
    """The cells of the markdown table under the ``## title...`` line of ``text`` (header dropped)."""
    block = text.split("\n## " + title, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    body = [r for r in rows[1:] if not r.startswith("|---")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in body]


def test_bench_cuda_smoke_run_prints_both_tables_with_no_graph_break_under_compile() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(BENCHMARKS / "bench_cuda.py"), "--device", "cpu", "--size", "64", "--features", "64",
           "--batch", "32", "--reps", "1", "--compile-backend", "eager"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    ops = _table(out, "fake_quant / quantize")
    bench = _load("bench_cuda")
    # every dtype x format x grouping, in order
    expected = [(label, d, g) for d in bench.DTYPES for label in bench.ROWS for g in ("last dim", "dim 0")]
    assert [tuple(r[:3]) for r in ops] == expected
    for r in ops:  # each ratio is its row's time over the clone's in the same mode
        clone, clone_q = float(r[3]), float(r[4])
        for at in (5, 9):
            ms, ratio, queued, ratio_q = float(r[at]), float(r[at + 1][:-1]), float(r[at + 2]), float(r[at + 3][:-1])
            assert ms > 0 and queued > 0
            # times printed to 4 significant digits, ratios to 2 decimals
            assert ratio == pytest.approx(ms / clone, rel=2e-3, abs=0.006)
            assert ratio_q == pytest.approx(queued / clone_q, rel=2e-3, abs=0.006)
    train = _table(out, "training step")
    assert [r[0] for r in train] == ["nn.Linear", "QuantLinear MXFP8 W+A", "recipe mxfp8"]
    assert [r[9] for r in train] == ["0", "0", "0"]  # graph breaks
    base, base_q = float(train[0][1]), float(train[0][3])
    for r in train:  # eager against nn.Linear's; compiled against its own eager, in each mode
        eager, eager_q, comp, comp_q = float(r[1]), float(r[3]), float(r[5]), float(r[7])
        assert float(r[2][:-1]) == pytest.approx(eager / base, rel=2e-3, abs=0.006)
        assert float(r[4][:-1]) == pytest.approx(eager_q / base_q, rel=2e-3, abs=0.006)
        assert float(r[6][:-1]) == pytest.approx(comp / eager, rel=2e-3, abs=0.006)
        assert float(r[8][:-1]) == pytest.approx(comp_q / eager_q, rel=2e-3, abs=0.006)


def test_memory_replay_counts_allocations_and_frees_of_tensors_from_before_the_step() -> None:
    peak = _load("cuda_memory_peak")
    ours = [{"filename": "/x/torch/nn/functional.py", "line": 1, "name": "linear"},
            {"filename": "/r/src/groupquant/nn/gemm/lean_gemm.py", "line": 70, "name": "lean"}]
    other = [{"filename": "/x/torch/autograd/graph.py", "line": 9, "name": "run"}]
    trace: List[Dict[str, object]] = [
        {"action": "free_requested", "addr": 1, "size": 40},  # last step's gradient: from before the trace
        {"action": "alloc", "addr": 2, "size": 100, "frames": ours},
        {"action": "segment_alloc", "addr": 9, "size": 4096},  # not a tensor: not counted
        {"action": "alloc", "addr": 3, "size": 30, "frames": other},
        {"action": "free_requested", "addr": 3, "size": 30},
        {"action": "free_completed", "addr": 3, "size": 30},  # the same free, completed: not counted twice
        {"action": "alloc", "addr": 4, "size": 50, "frames": []},
        {"action": "alloc", "addr": 5, "size": 20, "frames": other},  # 100 + 50 + 20 - 40 = 130: the peak
        {"action": "free_requested", "addr": 2, "size": 100},
        {"action": "alloc", "addr": 6, "size": 60, "frames": ours},  # 50 + 20 + 60 - 40 = 90
    ]
    top, freed_before, alive = peak.replay(trace)
    assert (top, freed_before) == (130, 40)
    assert [(a.size, a.where) for a in alive] == [
        (100, "groupquant/nn/gemm/lean_gemm.py:70 in lean"), (50, "(no Python frame)"),
        (20, "/x/torch/autograd/graph.py:9 in run")]
