"""Block-diagonal Walsh-Hadamard rotation along the last dim (the math of a layer's online rotation).

The normalised Sylvester matrix of size ``b`` (a power of two) is ``H_1 = [1]``,
``H_2b = [[H_b, H_b], [H_b, -H_b]] / sqrt(2)``: symmetric and orthogonal, so ``H^-1 = H^T = H``.
A block rotation of a ``[..., n]`` tensor applies ``H_b`` to each of its ``n / b`` consecutive
blocks of the last dim (``x @ blockdiag(H_b, ..., H_b)``). With ``b`` equal to a quantizer's group
size and groups aligned to the blocks, each rotated block mixes only the values of one group.

:func:`fwht` computes it by the fast Walsh-Hadamard transform (``log2(b)`` butterfly passes,
``n log2(b)`` additions, no matrix); :func:`hadamard_matrix` / :func:`block_hadamard_matrix` give
the dense matrices for offline use (rotating weights) and as test references.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch

__all__ = ["check_block_size", "fwht", "hadamard_matrix", "block_hadamard_matrix"]


def check_block_size(block_size: int, features: Optional[int] = None, setting: str = "block_size") -> int:
    """``block_size`` as an int; ValueError (naming ``setting``) unless it is a power of two >= 1
    that divides ``features`` (when given)."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1 \
            or block_size & (block_size - 1):
        raise ValueError(f"{setting} must be a power of two (1, 2, 4, ..., 32, ...) for a Walsh-Hadamard rotation, "
                         f"got {block_size!r}")
    if features is not None and features % block_size:
        raise ValueError(f"{setting}={block_size} does not divide the {features} features of the rotated dim; "
                         "a block rotation needs whole blocks")
    return block_size


def _passes_stacked(y: torch.Tensor, b: int) -> torch.Tensor:
    """The butterfly passes of ``y`` (``[rows, n / b, b]``), each a new ``(a + c, a - c)`` stack
    (the form torch.compile traces)."""
    h = 1
    while h < b:
        pairs = y.reshape(y.shape[0], y.shape[1], b // (2 * h), 2, h)
        a, c = pairs[..., 0, :], pairs[..., 1, :]
        y = torch.stack((a + c, a - c), dim=-2).reshape(y.shape)
        h *= 2
    return y


def _passes_in_place(y: torch.Tensor, b: int) -> torch.Tensor:
    """The same passes, the same additions in the same order, written into two buffers that the
    passes take turns on (no stack copy, no autograd graph): the eager form."""
    buffers = [torch.empty(y.shape, dtype=y.dtype, device=y.device)]
    h, turn = 1, 0
    while h < b:
        src = y.reshape(y.shape[0], y.shape[1], b // (2 * h), 2, h)
        dst = buffers[turn].view(src.shape)
        torch.add(src[..., 0, :], src[..., 1, :], out=dst[..., 0, :])
        torch.sub(src[..., 0, :], src[..., 1, :], out=dst[..., 1, :])
        y = buffers[turn]
        if len(buffers) == 1:
            buffers.append(torch.empty_like(y))  # the input is read no more: from now on two buffers alternate
        turn ^= 1
        h *= 2
    return y


def _transform(x: torch.Tensor, b: int) -> torch.Tensor:
    """``x @ blockdiag(H_b, ...)`` without autograd (``b > 1``)."""
    n = x.shape[-1]
    y = x.reshape(-1, n // b, b)
    passes = _passes_stacked if torch.compiler.is_compiling() else _passes_in_place
    return (passes(y, b) * (1.0 / math.sqrt(b))).reshape(x.shape)


class _BlockHadamard(torch.autograd.Function):
    """The rotation as one autograd node. ``H`` is symmetric, so the input's gradient is the
    output's gradient times ``blockdiag(H_b, ...)``: taken as one matrix product per block of ``b``
    (about 4x faster than the passes on a CPU; the gradient's rounding is not the forward's
    contract, only the forward's values are)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, b: int) -> torch.Tensor:
        ctx.b = b
        return _transform(x, b)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        b = ctx.b
        h = hadamard_matrix(b, dtype=grad.dtype, device=grad.device)
        return (grad.reshape(-1, b) @ h).reshape(grad.shape), None


def fwht(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """``x @ blockdiag(H_b, ...)`` along the last dim, ``H_b`` the normalised Sylvester Hadamard
    matrix of size ``b = block_size`` (orthonormal: applying it twice gives ``x`` back).

    Computed in ``x``'s dtype by the fast transform (``log2(b)`` passes of ``(a + c, a - c)`` on
    halves of blocks of ``2h``, then one product by ``1 / sqrt(b)``: the rounding ONNX export
    reproduces); the last dim must be a multiple of ``b``. Differentiable: the gradient is the same
    transform of the output's gradient.
    """
    n = x.shape[-1]
    b = check_block_size(block_size, n)
    if b == 1:
        return x
    if torch.is_grad_enabled() and x.requires_grad:
        return _BlockHadamard.apply(x, b)
    return _transform(x, b)


def hadamard_matrix(block_size: int, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """The normalised Sylvester Hadamard matrix ``[b, b]`` (symmetric, orthogonal), built by its
    recursion (independent of :func:`fwht`)."""
    b = check_block_size(block_size)
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < b:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return (h / math.sqrt(b)).to(dtype=dtype, device=device)


def block_hadamard_matrix(features: int, block_size: int, dtype: torch.dtype = torch.float64,
                          device=None) -> torch.Tensor:
    """The dense block-diagonal ``[features, features]`` matrix ``blockdiag(H_b, ..., H_b)``."""
    check_block_size(block_size, features)
    h = hadamard_matrix(block_size)
    return torch.block_diag(*([h] * (features // block_size))).to(dtype=dtype, device=device)
