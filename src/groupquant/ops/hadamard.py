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
from typing import Optional

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


def fwht(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """``x @ blockdiag(H_b, ...)`` along the last dim, ``H_b`` the normalised Sylvester Hadamard
    matrix of size ``b = block_size`` (orthonormal: applying it twice gives ``x`` back).

    Computed in ``x``'s dtype by the fast transform; the last dim must be a multiple of ``b``.
    """
    n = x.shape[-1]
    b = check_block_size(block_size, n)
    if b == 1:
        return x
    lead = x.shape[:-1]
    y = x.reshape(-1, n // b, b)
    h = 1
    while h < b:
        pairs = y.reshape(y.shape[0], n // b, b // (2 * h), 2, h)
        a, c = pairs[..., 0, :], pairs[..., 1, :]
        y = torch.stack((a + c, a - c), dim=-2).reshape(y.shape)
        h *= 2
    return (y * (1.0 / math.sqrt(b))).reshape(*lead, n)


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
