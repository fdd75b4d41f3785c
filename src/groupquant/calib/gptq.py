"""GPTQ for group-wise formats, with the group scales fixed before the column sweep.

Reference: E. Frantar, S. Ashkboos, T. Hoefler, D. Alistarh, "GPTQ: Accurate Post-Training
Quantization for Generative Pre-trained Transformers", ICLR 2023 (arXiv:2210.17323), Algorithm 1:
columns are quantized one at a time, and each column's rounding error, divided by the diagonal of
the upper Cholesky factor of ``H^-1``, is spread onto the columns not yet quantized (lazy batch
updates: inside a batch of ``batch_size`` columns at once, onto later batches in one matmul).
``H = mean(x x^T) + damping``, the damping ``percdamp * mean(diag(H))`` on the diagonal.

Group-wise formats: a naive GPTQ that recomputes a block's scale from the already-updated weights
can do worse than round to nearest (MXFP4's power-of-two scale jumps). Here the scales are fixed
first (:class:`~groupquant.calib.weight_grid.WeightGrid`: the layer's rule on the original weight,
or a searched grid), so the column order is free: act-order (columns by decreasing ``H_ii``) works
with blocks of any size. NVFP4's tensor scale is part of the fixed grid.
"""
from __future__ import annotations

import torch

from .weight_grid import WeightGrid

__all__ = ["gptq_quantize"]


def _check(w: torch.Tensor, h: torch.Tensor, percdamp: float, batch_size: int) -> None:
    if w.dim() != 2 or h.shape != (w.shape[1], w.shape[1]):
        raise ValueError(f"gptq: weight [O, I] and H [I, I] expected, got {tuple(w.shape)} and {tuple(h.shape)}")
    if not (isinstance(percdamp, (int, float)) and 0 <= percdamp < 1e3) or isinstance(percdamp, bool):
        raise ValueError(f"gptq percdamp must be a non-negative float (fraction of mean(diag(H))), got {percdamp!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"gptq batch_size must be a positive int (columns per lazy batch), got {batch_size!r}")
    for what, t in (("weight", w), ("H (the input second moment)", h)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"gptq: the {what} holds {int((~torch.isfinite(t)).sum())} non-finite value(s) (NaN / "
                             "Inf); calibrate on finite activations")


def _upper_inverse_factor(h: torch.Tensor, damp: float) -> torch.Tensor:
    """Upper Cholesky factor of ``(h + damp I)^-1`` (float64); the damping grows tenfold until H is
    positive definite."""
    eye = torch.eye(h.shape[0], dtype=h.dtype, device=h.device)
    for _ in range(8):
        chol, info = torch.linalg.cholesky_ex(h + damp * eye)
        if int(info) == 0:
            return torch.linalg.cholesky(torch.cholesky_inverse(chol), upper=True)
        damp = max(damp * 10.0, 1e-8)
    raise ValueError("gptq: H is not positive definite even after damping (calibration inputs are degenerate)")


@torch.no_grad()
def gptq_quantize(w: torch.Tensor, h: torch.Tensor, grid: WeightGrid, *, percdamp: float = 0.01,
                  batch_size: int = 128, act_order: bool = True) -> torch.Tensor:
    """GPTQ's quantized weight for ``w`` (``[O, I]``) under input second moment ``h`` (``[I, I]``),
    every element rounded onto ``grid`` (float32 ``[O, I]``, on the grid).

    percdamp: diagonal damping, a fraction of ``mean(diag(h))``; batch_size: columns per lazy batch;
    act_order: sweep columns by decreasing ``h_ii`` (the scales are fixed, so any order is allowed).
    Inputs that never fire (``h_ii == 0``) get ``h_ii = 1``: their columns are rounded to nearest.
    """
    _check(w, h, percdamp, batch_size)
    n = w.shape[1]
    H = h.double().clone()
    W = w.double().clone()
    dead = torch.diagonal(H) == 0
    H[dead, dead] = 1.0
    damp = float(percdamp) * float(torch.diagonal(H).mean())
    perm = torch.argsort(torch.diagonal(H), descending=True, stable=True) if act_order else torch.arange(n, device=H.device)
    W = W[:, perm]
    H = H[perm][:, perm]
    U = _upper_inverse_factor(H, damp)
    Q = torch.zeros_like(W)
    order = perm.tolist()
    for i1 in range(0, n, batch_size):
        i2 = min(i1 + batch_size, n)
        W1 = W[:, i1:i2].clone()
        U1 = U[i1:i2, i1:i2]
        pivots = torch.diagonal(U1).tolist()  # (Python floats: the same quotients, fewer tensor calls)
        err1 = torch.zeros_like(W1)
        for i in range(i2 - i1):
            col = W1[:, i]
            q = grid.quantize_column(col, order[i1 + i])
            Q[:, i1 + i] = q
            e = (col - q) / pivots[i]
            W1[:, i:].addcmul_(e.unsqueeze(1), U1[i, i:].unsqueeze(0), value=-1.0)  # w - e u, in place
            err1[:, i] = e
        W[:, i2:] -= err1 @ U[i1:i2, i2:]
    out = torch.empty_like(Q)
    out[:, perm] = Q
    return out.float()
