"""Make the emulated CUDA kernels' loader (``emulated_cuda.py`` beside this file) and the schemes
every device must compute alike (``tests/ops/device_schemes.py``) importable by the csrc tests
(pytest runs with ``--import-mode=importlib``, which does not put test folders on ``sys.path``)."""
from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _folder in (_HERE, _HERE.parent / "ops"):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
