"""The package's top level: every public name imports (``from groupquant import X``), and a plain
``import groupquant`` loads only what ``fake_quant`` needs (not the compiler, layers or export)."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import groupquant

SRC = str(Path(__file__).resolve().parents[1] / "src")

# where each public name is defined, by a route other than the package's lazy table
HOMES = {
    "PackedTensor": "groupquant.packing", "pack": "groupquant.packing", "quantize_model": "groupquant.nn",
    "pack_model": "groupquant.export", "unpack_model": "groupquant.export", "describe": "groupquant.quantizers",
    "fake_quant": "groupquant.ops", "quantize": "groupquant.ops", "GroupQuantized": "groupquant.ops",
    "ptq": "groupquant.calib", "save": "groupquant.export", "load": "groupquant.export",
    "qat": "groupquant.calib.qat",
}
# public module names -> the module each names (``gq.train`` is the qat package, ``calib/qat/``)
SUBMODULES = {"nn": "groupquant.nn", "proxy": "groupquant.proxy", "quantizers": "groupquant.quantizers",
              "quant_tensor": "groupquant.quant_tensor", "calib": "groupquant.calib", "eval": "groupquant.eval",
              "train": "groupquant.calib.qat"}


def _fresh(code: str) -> str:
    """stdout of ``code`` run in a fresh interpreter (nothing of groupquant imported yet)."""
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_public_name_imports_with_from_import_in_a_fresh_process():
    """``from groupquant import X`` for each public name, none of them loaded before (one process)."""
    code = "import sys\n" + "".join(
        f"assert 'groupquant' not in sys.modules or {name!r} in dir(sys.modules['groupquant'])\n"
        f"from groupquant import {name}\nprint({name!r}, type({name}).__name__)\n" for name in groupquant.__all__)
    printed = [line.split()[0] for line in _fresh(code).splitlines()]
    assert printed == list(groupquant.__all__)


@pytest.mark.parametrize("name", sorted(set(groupquant.__all__) - {"__version__"}))
def test_every_public_name_is_the_object_of_its_home_module(name):
    value = getattr(groupquant, name)
    if name in SUBMODULES:
        assert value is importlib.import_module(SUBMODULES[name])
    elif name in HOMES:
        assert value is getattr(importlib.import_module(HOMES[name]), name)
    else:
        assert value is getattr(importlib.import_module("groupquant.formats"), name)


def test_dir_lists_every_public_name_and_unknown_names_raise():
    assert set(groupquant.__all__) <= set(dir(groupquant))
    with pytest.raises(AttributeError, match="no attribute 'fake_quantize'"):
        groupquant.fake_quantize  # noqa: B018


def test_a_plain_import_and_fake_quant_load_neither_the_compiler_nor_the_layers():
    out = _fresh(
        "import sys, torch, groupquant as gq\n"
        "gq.fake_quant(torch.randn(4, 64), 'fp4_e2m1')\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('torch._dynamo', 'groupquant.')))))\n")
    loaded = set(out.split())
    assert not any(m.startswith("torch._dynamo") for m in loaded)
    assert not loaded & {"groupquant.nn", "groupquant.export", "groupquant.quantizers", "groupquant.packing",
                         "groupquant.proxy", "groupquant.quant_tensor", "groupquant.inject"}
    assert "groupquant.ops" in loaded


def test_the_lazy_names_load_on_first_use():
    out = _fresh("import sys, groupquant as gq\n"
                 "before = 'groupquant.nn' in sys.modules\n"
                 "layer = gq.nn.QuantLinear(4, 4)\n"
                 "print(before, 'groupquant.nn' in sys.modules, gq.quantize_model is gq.nn.quantize_model)")
    assert out.split() == ["False", "True", "True"]
