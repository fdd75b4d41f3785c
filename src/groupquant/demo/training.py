"""A small classifier's training loop (with a progress bar) and its evaluation.

Used for both phases of the demo: training the float model, and quantization-aware fine-tuning
of a quantized copy (the same loop: the quantized layers pass gradients straight through).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TrainConfig", "TrainHistory", "Evaluation", "train_classifier", "evaluate", "gradient_sqnr_db"]


@dataclass(frozen=True)
class TrainConfig:
    """How to train: ``epochs`` passes over the data in shuffled mini-batches of ``batch_size``,
    AdamW with learning rate ``lr``; ``seed`` fixes the batch order; ``progress`` shows a tqdm bar
    (on stderr) labelled ``desc``."""

    epochs: int = 15
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0
    progress: bool = True
    desc: str = "train"

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "epochs" else 1):
                raise ValueError(f"{name} must be a {'non-negative' if name == 'epochs' else 'positive'} int, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")


@dataclass
class TrainHistory:
    """Mean training loss (cross-entropy, nats) of each epoch, in order."""

    epoch_loss: List[float] = field(default_factory=list)


@dataclass(frozen=True)
class Evaluation:
    """Test metrics: ``accuracy`` (fraction correct, 0..1) and ``loss`` (mean cross-entropy, nats)."""

    accuracy: float
    loss: float


def train_classifier(model: nn.Module, x: torch.Tensor, y: torch.Tensor, config: TrainConfig) -> TrainHistory:
    """Train ``model`` in place on ``(x, y)`` with cross-entropy; returns the loss of each epoch."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} rows but y has {y.shape[0]} labels")
    from tqdm import tqdm

    gen = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    n = x.shape[0]
    batches = -(-n // config.batch_size)
    history = TrainHistory()
    model.train()
    with tqdm(total=config.epochs * batches, desc=config.desc, unit="step", disable=not config.progress,
              leave=True, dynamic_ncols=True) as bar:
        for _ in range(config.epochs):
            order = torch.randperm(n, generator=gen)
            total = 0.0
            for start in range(0, n, config.batch_size):
                idx = order[start:start + config.batch_size]
                loss = F.cross_entropy(model(x[idx]), y[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * len(idx)
                bar.update(1)
            history.epoch_loss.append(total / n)
            bar.set_postfix(loss=f"{history.epoch_loss[-1]:.4f}")
    model.eval()
    return history


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Evaluation:
    """Accuracy and mean cross-entropy of ``model`` on ``(x, y)`` (eval mode, no gradients)."""
    model.eval()
    logits = model(x)
    accuracy = float((logits.argmax(dim=1) == y).float().mean())
    return Evaluation(accuracy=accuracy, loss=float(F.cross_entropy(logits, y)))


def _weight_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> List[torch.Tensor]:
    """The weight gradients of ``model``'s Linear layers (quant ones included) for the mean loss on ``(x, y)``."""
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    was_training = model.training
    model.train()
    try:
        grads = torch.autograd.grad(F.cross_entropy(model(x), y), weights)
    finally:
        model.train(was_training)
    return [g.detach().double() for g in grads]


def gradient_sqnr_db(reference: nn.Module, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """How close ``model``'s weight gradients are to ``reference``'s on one batch: SQNR in dB over
    all Linear weights together, ``10 log10(sum g^2 / sum (g - g_model)^2)`` (inf when equal).

    Give both the same weights (a float model and its quantized copy) to see what quantizing the
    forward and backward GEMMs does to the gradient. Leaves ``.grad`` of both models untouched.
    """
    ref, got = _weight_grads(reference, x, y), _weight_grads(model, x, y)
    if len(ref) != len(got) or not ref or any(a.shape != b.shape for a, b in zip(ref, got)):
        raise ValueError("the two models' Linear layers do not match")
    signal = sum(float(g.pow(2).sum()) for g in ref)
    noise = sum(float((a - b).pow(2).sum()) for a, b in zip(ref, got))
    return float("inf") if noise == 0 else 10.0 * math.log10(signal / noise)
