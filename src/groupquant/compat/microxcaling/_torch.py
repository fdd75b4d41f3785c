"""The torch functions compat ops call, captured at import, and :func:`native_torch`, within which injected
torch entries call these originals (so groupquant's own arithmetic is never replaced or rounded).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch
import torch.nn.functional as F

exp, log, sqrt, tanh, sigmoid, matmul = torch.exp, torch.log, torch.sqrt, torch.tanh, torch.sigmoid, torch.matmul
linear, conv1d, conv2d, conv3d = F.linear, F.conv1d, F.conv2d, F.conv3d
relu, relu6, leaky_relu, silu, gelu, softmax = F.relu, F.relu6, F.leaky_relu, F.silu, F.gelu, F.softmax
layer_norm, group_norm, batch_norm = F.layer_norm, F.group_norm, F.batch_norm

_STATE = threading.local()


def in_native_torch() -> bool:
    """Whether this thread runs inside :func:`native_torch` (injected entries then call the originals)."""
    return getattr(_STATE, "depth", 0) > 0


@contextlib.contextmanager
def native_torch() -> Iterator[None]:
    """Within: every injected torch entry calls its original (re-entrant, per thread)."""
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        yield
    finally:
        _STATE.depth -= 1
