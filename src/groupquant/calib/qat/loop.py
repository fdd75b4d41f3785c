"""The training loop of quantization-aware training: micro-batches, gradient accumulation, the
learning-rate schedule, clipping, held-out perplexity, early stopping, a progress bar.

One optimiser step (``TrainConfig``): set the step's learning rate; for each of the rank's
``grad_accumulation`` micro-batches (:class:`~.data.MicroBatchOrder`) run the teacher (no
gradient) and the student (under bfloat16 autocast when asked, blocks checkpointed when asked),
and back-propagate ``loss / grad_accumulation`` (under DDP / FSDP2 the gradients are averaged over
the ranks once, on the last micro-batch: :func:`~.parallel.gradient_sync`); clip the trainable
parameters' gradient norm; step. Every ``eval_every`` steps and after the last one, the held-out
perplexity (:func:`groupquant.eval.perplexity`, float32, eval mode) is measured and fed to
:class:`~.history.EarlyStopping`; at the end the parameters of the best evaluation come back.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch import nn

from ...eval import perplexity
from .checkpointing import checkpointed_blocks
from .data import MicroBatchOrder, call, mask_of, to_device, token_ids_of
from .distill import Distillation, distillation_loss
from .dropout import dropout_off
from .history import EarlyStopping, StepRecord
from .parallel import gradient_sync, world_and_rank
from .schedule import Schedule, build_optimizer
from .trainable import Trainable

__all__ = ["TrainConfig", "Models", "world_and_rank", "train_loop"]


@dataclass(frozen=True)
class TrainConfig:
    """The settings of one run (:func:`groupquant.qat` checks them and builds this record)."""

    steps: int
    distill: Distillation
    schedule: Schedule
    optimizer: Any = "adamw"
    weight_decay: float = 0.0
    grad_clip: Optional[float] = 1.0
    grad_accumulation: int = 1
    checkpoint_blocks: bool = False
    dropout: bool = False
    autocast: Optional[torch.dtype] = None
    eval_every: Optional[int] = None
    eval_seq_len: Optional[int] = None
    patience: Optional[int] = None
    progress: bool = True
    seed: int = 0


@dataclass(frozen=True)
class Models:
    """``student``: the model being trained (under FSDP2 the sharded copy); ``engine``: what the
    forward calls (the student, or its ``DistributedDataParallel`` wrapper); ``teacher``: the
    reference, or None; ``release``: called after each held-out evaluation (FSDP2 reshards)."""

    student: nn.Module
    engine: nn.Module
    teacher: Optional[nn.Module]
    release: Optional[Callable[[], None]] = None


def _bar(total: int, enabled: bool) -> Any:
    """A tqdm bar (when installed and ``enabled``), else None."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="qat")


def _call_keywords(model: nn.Module, hidden: bool) -> dict:
    """Keywords of every forward: ``use_cache=False`` for a model with a cache setting (no KV cache
    in training), ``output_hidden_states=True`` when hidden states are compared."""
    extra = {"use_cache": False} if hasattr(getattr(model, "config", None), "use_cache") else {}
    if hidden:
        extra["output_hidden_states"] = True
    return extra


def _autocast(device: torch.device, dtype: Optional[torch.dtype]) -> Any:
    return contextlib.nullcontext() if dtype is None else torch.autocast(device_type=device.type, dtype=dtype)


class _Stepper:
    """Runs the micro-batches of one optimiser step and returns their mean loss terms."""

    def __init__(self, models: Models, items: Sequence[Any], cfg: TrainConfig, world: int) -> None:
        self.models, self.items, self.cfg, self.world = models, items, cfg, world
        self.device = next(models.student.parameters()).device
        hidden = cfg.distill.needs_hidden
        self.student_kw = _call_keywords(models.student, hidden)
        self.teacher_kw = {} if models.teacher is None else _call_keywords(models.teacher, hidden)
        self.teacher_device = None if models.teacher is None else next(
            (p.device for p in models.teacher.parameters()), self.device)

    def _one(self, item: Any) -> Any:
        """The loss terms of one micro-batch (gradient recorded for the student)."""
        teacher_out = None
        with _autocast(self.device, self.cfg.autocast):
            if self.cfg.distill.needs_teacher:
                with torch.no_grad():
                    teacher_out = call(self.models.teacher, to_device(item, self.teacher_device), self.teacher_kw)
            out = call(self.models.engine, item, self.student_kw)
            return distillation_loss(out, teacher_out, token_ids_of(item), mask_of(item), self.cfg.distill)

    def step(self, indices: List[int]) -> torch.Tensor:
        """Forward and backward of the micro-batches ``indices``; ``[total, kl, lm, hidden]`` means
        over them and over the ranks (float64; a term that is off is 0)."""
        sums = torch.zeros(4, dtype=torch.float64)
        for j, index in enumerate(indices):
            with gradient_sync(self.models.engine, j == len(indices) - 1):
                parts = self._one(to_device(self.items[index], self.device))
                (parts.total / len(indices)).backward()
            terms = [parts.total.detach()] + [t if t is not None else torch.zeros(()) for t in
                                               (parts.kl, parts.lm, parts.hidden)]
            sums += torch.stack([t.double().cpu() for t in terms])
        if self.world > 1:
            reduced = sums.to(self.device)
            dist.all_reduce(reduced)
            sums = reduced.cpu() / self.world
        return sums / len(indices)


def train_loop(models: Models, items: Sequence[Any], eval_tokens: Optional[torch.Tensor], trainable: Trainable,
               cfg: TrainConfig) -> tuple:
    """Train (module doc); ``(history, best step or None)``. The student ends in the training mode
    it started in."""
    world, rank = world_and_rank()
    order = MicroBatchOrder(len(items), cfg.seed, cfg.grad_accumulation, world, rank)
    params = trainable.parameters()
    opt = build_optimizer(trainable.named(), cfg.optimizer, cfg.schedule.lr, cfg.weight_decay)
    stopper = EarlyStopping(params, cfg.patience)
    stepper = _Stepper(models, items, cfg, world)
    student = models.student
    history: List[StepRecord] = []
    was_training = student.training

    def held_out() -> Optional[float]:
        if eval_tokens is None:
            return None
        ppl = perplexity(student, eval_tokens, seq_len=cfg.eval_seq_len, progress=False)
        if models.release is not None:
            models.release()
        return ppl

    last_ppl = None
    if eval_tokens is not None:
        start = last_ppl = held_out()
        stopper.update(0, start)
        history.append(StepRecord(0, None, None, start))
    bar = _bar(cfg.steps, cfg.progress and rank == 0)
    teacher = models.teacher
    teacher_was_training = teacher.training if teacher is not None else False
    if teacher is not None:
        teacher.eval()
    student.train()
    try:
        with checkpointed_blocks(student, cfg.checkpoint_blocks), dropout_off(student, not cfg.dropout):
            for step in range(cfg.steps):
                lr = cfg.schedule.lr_at(step, cfg.steps)
                for group in opt.param_groups:
                    group["lr"] = lr
                means = stepper.step(order.items_of_step(step))
                loss = float(means[0])
                if not torch.isfinite(means[0]):
                    raise FloatingPointError(f"qat: the loss at step {step + 1} is {loss} (not finite); lower lr "
                                             f"(now {lr:.3g}) or set grad_clip")
                if cfg.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                opt.step()
                opt.zero_grad(set_to_none=True)
                ppl, stop = None, False
                if eval_tokens is not None and ((step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps):
                    ppl = held_out()
                    stop = stopper.update(step + 1, ppl)
                terms = [None if not on else float(v) for on, v in zip(
                    (cfg.distill.kl_weight > 0, cfg.distill.lm_weight > 0, cfg.distill.hidden_weight > 0), means[1:])]
                history.append(StepRecord(step + 1, loss, lr, ppl, *terms))
                last_ppl = ppl if ppl is not None else last_ppl
                if bar is not None:
                    bar.update()
                    bar.set_postfix(loss=f"{loss:.4f}", **({} if last_ppl is None else {"ppl": f"{last_ppl:.3f}"}))
                if stop:
                    break
    finally:
        if bar is not None:
            bar.close()
        student.train(was_training)
        if teacher is not None:
            teacher.train(teacher_was_training)
    best = stopper.restore()
    return history, best
