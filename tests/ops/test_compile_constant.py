"""compile_constant marks a function as torch.compiler.assume_constant_result does, without
importing torch._dynamo; fake_quant still traces whole (fullgraph) on its first call."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from groupquant.ops.compile_constant import compile_constant

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_the_mark_is_the_one_torchs_decorator_sets():
    def by_torch() -> int:
        return 1

    def by_us() -> int:
        return 1

    before = set(vars(by_torch))
    torch.compiler.assume_constant_result(by_torch)
    assert compile_constant(by_us) is by_us
    added = {k: v for k, v in vars(by_torch).items() if k not in before}
    assert added and added == vars(by_us)


def _run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_fake_quant_compiles_fullgraph_on_its_first_call_in_a_fresh_process():
    """The native-backend check is a constant to dynamo even before any eager call has cached it."""
    out = _run(
        "import torch, groupquant as gq\n"
        "x = torch.randn(4, 64)\n"
        "f = torch.compile(lambda t: gq.fake_quant(t, 'fp4_e2m1'), fullgraph=True, backend='eager')\n"
        "print(torch.equal(f(x), gq.fake_quant(x, 'fp4_e2m1')))\n")
    assert out.split()[-1] == "True"
