"""Suite-wide test settings.

Under CI (the ``CI`` environment variable set, as `.ci/run` runs), hypothesis draws its examples
from a fixed seed, so a run is reproducible; locally every run explores new examples.

Tests that reach into torch's internals (custom ops and their fake kernels, torch.compile,
torch.export and the ONNX exporter, torch.distributed) carry the marker ``torch_internals``:
`make test` runs them a second time on the oldest torch of setup.cfg's range
(``make test-oldest-torch``), so the range promised is the range tested.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List

import pytest
import torch

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: Test files (or folders, ending in /) relative to tests/ whose every test touches torch internals.
TORCH_INTERNALS_PATHS = ("ops/test_native.py", "ops/test_native_group_dim.py", "ops/test_compile_constant.py",
                         "ops/test_device_parity.py", "distributed/", "export/test_onnx_model.py",
                         "export/test_onnx_nvfp4.py", "export/test_onnx_quant_layers.py",
                         "export/test_onnx_weight.py", "export/test_onnx_act_quant.py", "csrc/test_check_messages.py")
#: Words in a test's name that mark it elsewhere (torch.compile of layers, recipes and ops).
TORCH_INTERNALS_WORDS = ("compile", "fullgraph", "dynamo", "torch_export")

_TESTS = Path(__file__).resolve().parent


@pytest.fixture
def one_thread():
    """One torch thread for the test, restored afterwards: tiny ops only contend on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Mark the tests of :data:`TORCH_INTERNALS_PATHS` and :data:`TORCH_INTERNALS_WORDS` ``torch_internals``."""
    for item in items:
        try:
            rel = Path(str(item.fspath)).resolve().relative_to(_TESTS).as_posix()
        except ValueError:
            continue
        if rel.startswith(TORCH_INTERNALS_PATHS) or any(w in item.name.lower() for w in TORCH_INTERNALS_WORDS):
            item.add_marker(pytest.mark.torch_internals)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool:
    """Under ``-m torch_internals`` (the oldest-torch run, whose environment has only the test
    essentials), skip importing test files that hold no such test."""
    if config.option.markexpr != "torch_internals" or collection_path.suffix != ".py" \
            or not collection_path.name.startswith("test_"):
        return False
    rel = collection_path.resolve().relative_to(_TESTS).as_posix()
    if rel.startswith(TORCH_INTERNALS_PATHS):
        return False
    names = re.findall(r"def (test_\w+)", collection_path.read_text())
    return not any(w in n.lower() for n in names for w in TORCH_INTERNALS_WORDS)

