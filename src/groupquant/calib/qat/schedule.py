"""The optimiser and its learning-rate schedule for quantization-aware training.

:class:`Schedule`: the learning rate rises linearly over ``warmup_steps`` (from ``lr / warmup_steps``
at the first step to ``lr``), then decays to ``min_lr_ratio * lr`` at the last step, along a cosine
(``"cosine"``), a straight line (``"linear"``) or not at all (``"constant"``). :func:`build_optimizer`
makes AdamW (the default), Adam or SGD (momentum 0.9) over the chosen parameters; weight decay
applies to matrices only (norm gains, biases and scales are not decayed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Tuple, Union

import torch
from torch import nn

from ...inject import did_you_mean

__all__ = ["Schedule", "DECAYS", "OPTIMIZERS", "build_optimizer"]

#: The decay shapes after the warm-up.
DECAYS = ("cosine", "linear", "constant")
#: The optimisers by name.
OPTIMIZERS = ("adamw", "adam", "sgd")


def _positive(name: str, value: Any, allow_zero: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"qat: {name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}")


@dataclass(frozen=True)
class Schedule:
    """Learning rate per optimiser step (module doc).

    Fields: ``lr`` (peak, > 0), ``warmup_steps`` (int >= 0), ``decay`` (one of :data:`DECAYS`),
    ``min_lr_ratio`` (in [0, 1]: the last step's rate over ``lr``).
    """

    lr: float = 1e-5
    warmup_steps: int = 0
    decay: str = "cosine"
    min_lr_ratio: float = 0.1

    def __post_init__(self) -> None:
        _positive("lr", self.lr)
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"qat: warmup_steps must be an int >= 0, got {self.warmup_steps!r}")
        if self.decay not in DECAYS:
            raise ValueError(f"qat: schedule={self.decay!r} is not one of {list(DECAYS)}"
                             f"{did_you_mean(str(self.decay), DECAYS)}")
        _positive("min_lr_ratio", self.min_lr_ratio, allow_zero=True)
        if self.min_lr_ratio > 1:
            raise ValueError(f"qat: min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio!r}")

    def lr_at(self, step: int, steps: int) -> float:
        """The learning rate of optimiser step ``step`` (0-based) of ``steps``."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        span = max(steps - self.warmup_steps - 1, 1)
        done = min(max(step - self.warmup_steps, 0) / span, 1.0)
        low = self.lr * self.min_lr_ratio
        if self.decay == "constant":
            return self.lr
        if self.decay == "linear":
            return self.lr - (self.lr - low) * done
        return low + (self.lr - low) * 0.5 * (1.0 + math.cos(math.pi * done))


OptimizerFactory = Callable[[List[dict]], torch.optim.Optimizer]


def _groups(named: Iterable[Tuple[str, nn.Parameter]], weight_decay: float) -> List[dict]:
    """Two parameter groups: matrices (decayed) and everything else (not decayed)."""
    decayed, plain = [], []
    for _, p in named:
        (decayed if p.dim() >= 2 else plain).append(p)
    groups = [dict(params=decayed, weight_decay=weight_decay), dict(params=plain, weight_decay=0.0)]
    return [g for g in groups if g["params"]]


def build_optimizer(named: Iterable[Tuple[str, nn.Parameter]], optimizer: Union[str, OptimizerFactory],
                    lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """The optimiser over ``named`` parameters: a name of :data:`OPTIMIZERS`, or a callable that
    takes the parameter groups (dicts with ``params`` and ``weight_decay``) and returns one."""
    _positive("weight_decay", weight_decay, allow_zero=True)
    groups = _groups(named, weight_decay)
    if callable(optimizer):
        opt = optimizer(groups)
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"qat(optimizer=...): the callable must return a torch.optim.Optimizer, got "
                            f"{type(opt).__name__}")
        return opt
    if optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=lr)
    if optimizer == "adam":
        return torch.optim.Adam(groups, lr=lr)
    if optimizer == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=0.9)
    raise ValueError(f"qat: optimizer={optimizer!r} is not one of {list(OPTIMIZERS)} (or a callable)"
                     f"{did_you_mean(str(optimizer), OPTIMIZERS)}")
