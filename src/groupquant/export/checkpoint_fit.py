"""Deprecated module path: the checks moved to :mod:`groupquant.export.checkpoints.fit` (documented
``groupquant.export.checkpoint_fit.FUNCTION_KEYS`` keeps working, with a DeprecationWarning)."""
from __future__ import annotations

import warnings

from .checkpoints.fit import FUNCTION_KEYS, attach_input_rotations, check_config, check_rotations

__all__ = ["FUNCTION_KEYS", "check_config", "check_rotations", "attach_input_rotations"]

warnings.warn("groupquant.export.checkpoint_fit moved to groupquant.export.checkpoints.fit",
              DeprecationWarning, stacklevel=2)
