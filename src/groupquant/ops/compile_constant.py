"""Mark a function's result as a constant to ``torch.compile`` without importing the compiler.

``torch.compiler.assume_constant_result`` imports ``torch._dynamo`` (about 3 s, as long as
``import torch`` itself) the moment it decorates a function, so decorating at module level made
``import groupquant`` take twice ``import torch``. The decorator only marks the function (torch
2.13: ``torch/_dynamo/decorators.py`` sets ``fn._dynamo_marked_constant = True``, which dynamo
reads when it traces a call); :func:`compile_constant` sets the same mark without the import,
and ``tests/ops/test_compile_constant.py`` checks that it equals torch's decorator.
"""
from __future__ import annotations

from typing import Callable, TypeVar

__all__ = ["compile_constant", "CONSTANT_MARK"]

#: The attribute torch.compiler.assume_constant_result sets on the function it marks.
CONSTANT_MARK = "_dynamo_marked_constant"

F = TypeVar("F", bound=Callable)


def compile_constant(fn: F) -> F:
    """``fn``, marked as returning a constant under ``torch.compile`` (what
    ``torch.compiler.assume_constant_result`` does, without importing ``torch._dynamo``)."""
    setattr(fn, CONSTANT_MARK, True)
    return fn
