"""Make the independent numpy oracle (``mx_oracle.py`` beside this file) importable by the ops tests.

pytest runs with ``--import-mode=importlib``, which does not put test folders on ``sys.path``.
"""
from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
