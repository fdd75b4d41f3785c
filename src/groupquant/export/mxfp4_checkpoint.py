"""Deprecated module path: the gpt-oss MXFP4 tensor helpers moved to
:mod:`groupquant.export.checkpoints.mxfp4` (they are also ``groupquant.export.mxfp4_linear`` /
``mxfp4_packed_tensor`` / ``mxfp4_blocks``); this path keeps working, with a DeprecationWarning."""
from __future__ import annotations

import warnings

from .checkpoints.mxfp4 import MXFP4_BLOCK, mxfp4_blocks, mxfp4_linear, mxfp4_packed_tensor

__all__ = ["mxfp4_packed_tensor", "mxfp4_blocks", "mxfp4_linear", "MXFP4_BLOCK"]

warnings.warn("groupquant.export.mxfp4_checkpoint moved to groupquant.export.checkpoints.mxfp4 (or use "
              "groupquant.export.mxfp4_linear / mxfp4_packed_tensor / mxfp4_blocks)", DeprecationWarning, stacklevel=2)
