"""Module paths the docs named before export/ was split by job keep working, with a DeprecationWarning."""
from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize("old, new, names", [
    ("groupquant.export.checkpoint_fit", "groupquant.export.checkpoints.fit", ["FUNCTION_KEYS", "check_config"]),
    ("groupquant.export.mxfp4_checkpoint", "groupquant.export.checkpoints.mxfp4", ["mxfp4_linear", "MXFP4_BLOCK"]),
])
def test_old_module_path_warns_and_gives_the_same_objects(old, new, names):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    moved = importlib.import_module(new)
    for name in names:
        assert getattr(module, name) is getattr(moved, name)
