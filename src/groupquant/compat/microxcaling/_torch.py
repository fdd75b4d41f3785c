"""The torch functions compat ops call, captured at import, and the guard that keeps them native.

``inject_pyt_ops`` replaces entries of ``torch`` and ``torch.nn.functional`` (``torch.div``,
``torch.exp``, ``F.linear``, ...). Compat ops call the originals kept here, and groupquant's own
arithmetic (rounding, fake quantization) runs inside :func:`native_torch`, during which the
injected entries call the originals too; so an injected op never recurses into itself or rounds
groupquant's internal steps.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch
import torch.nn.functional as F

__all__ = ["native_torch", "in_native_torch", "exp", "exp2", "log", "sqrt", "tanh", "matmul", "linear",
           "conv1d", "conv2d", "relu",
           "sigmoid", "silu", "gelu", "softmax", "layer_norm", "group_norm", "batch_norm",
           "relu6", "leaky_relu", "conv3d"]

exp, exp2, log, sqrt, tanh, matmul = torch.exp, torch.exp2, torch.log, torch.sqrt, torch.tanh, torch.matmul
linear, conv1d, conv2d, relu = F.linear, F.conv1d, F.conv2d, F.relu
sigmoid, silu, gelu, softmax, layer_norm = torch.sigmoid, F.silu, F.gelu, F.softmax, F.layer_norm
group_norm, batch_norm = F.group_norm, F.batch_norm
relu6, leaky_relu, conv3d = F.relu6, F.leaky_relu, F.conv3d

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
