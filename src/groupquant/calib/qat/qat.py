"""qat(): quantization-aware training of a language model by distillation from its float self.

Steps: (1) check every setting (errors name it); (2) a float ``model`` is copied as the teacher
(unless ``teacher`` is given) and converted and calibrated by :func:`groupquant.ptq` with ``recipe``
(``methods=[]``: round to nearest); an already converted model trains as it is and needs a
``teacher``; (3) the parts named by ``train`` (:mod:`.trainable`) train, everything else is frozen;
(4) the loop (:mod:`.loop`) distils (:mod:`.distill`) with the optimiser and schedule
(:mod:`.schedule`), measuring held-out perplexity and stopping early; under ``torch.distributed``
with more than one rank the student runs as ``DistributedDataParallel`` or, with
``parallel="fsdp2"``, as an FSDP2-sharded copy gathered back into the model at the end
(:mod:`.parallel`), and each rank takes its share of the micro-batches (:mod:`.data`), so the run
computes what one process computes with ``grad_accumulation * world`` micro-batches per step.

By default the training backward is straight through (``backward="straight_through"``): the
recipe's forward quantizers, float gradients, whatever the recipe quantizes in its own backward;
the forward, hence the trained model's inference, state dict, packed form and exports, is the
recipe's. ``backward="recipe"`` keeps the recipe's quantized backward GEMMs.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Optional, Union

import torch
from torch import nn

from ..ptq import ptq
from ...eval.perplexity import context_length, vocabulary_size
from ...nn import SAME, QuantLayerMixin
from ...nn.recipes import Recipe
from ...nn.recipes import recipe as recipe_of
from .data import check_eval_tokens, check_training_data
from .distill import Distillation
from .history import format_history
from .loop import Models, TrainConfig, train_loop
from .parallel import Parallel, check_parallel, world_and_rank
from .schedule import Schedule
from .trainable import frozen_except, select_trainable

__all__ = ["qat", "BACKWARDS", "AUTOCAST"]

#: ``backward=`` values.
BACKWARDS = ("straight_through", "recipe")
#: ``autocast=`` values (bfloat16 only: float16 would need loss scaling).
AUTOCAST = (None, "bfloat16")


def _int_at_least(name: str, value: Any, low: int, allow_none: bool = False) -> Optional[int]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        extra = " or None" if allow_none else ""
        raise ValueError(f"qat: {name} must be an int >= {low}{extra}, got {value!r}")
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"qat: {name} must be True or False, got {value!r}")
    return value


def _is_converted(model: nn.Module) -> bool:
    """Whether ``model`` holds groupquant quant layers (or the functional mode of a recipe)."""
    return "_groupquant_functional" in model.__dict__ or any(isinstance(m, QuantLayerMixin) for m in model.modules())


def _straight_through(r: Recipe) -> Recipe:
    """``r`` with every backward slot float: the forward quantizers with a straight-through backward."""
    return r.replace(grad_output_quant=None, weight_quant_for_grad_input=SAME, grad_output_quant_for_grad_weight=SAME,
                     input_quant_for_grad_weight=SAME, quantize_backprop=None)


def _autocast_dtype(autocast: Any) -> Optional[torch.dtype]:
    if autocast is None:
        return None
    if autocast in ("bfloat16", torch.bfloat16):
        return torch.bfloat16
    raise ValueError(f"qat: autocast must be None or 'bfloat16', got {autocast!r} (float16 would need loss scaling)")


def _check_teacher(teacher: Any, model: nn.Module, vocab: Optional[int]) -> None:
    if not isinstance(teacher, nn.Module):
        raise TypeError(f"qat: teacher must be a torch.nn.Module (the float model), got {type(teacher).__name__}")
    if teacher is model:
        raise ValueError("qat: teacher is the model being trained; give the float model (a separate copy)")
    theirs = vocabulary_size(teacher)
    if vocab is not None and theirs is not None and theirs != vocab:
        raise ValueError(f"qat: the teacher's vocabulary ({theirs} tokens) differs from the model's ({vocab}); "
                         "distillation compares their logits token by token")


def _device_rng(model: nn.Module) -> list:
    """The CUDA devices whose generators fork_rng must save (the model's, when on CUDA)."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    return [device] if device.type == "cuda" else []


def qat(model: nn.Module, data: Any, *, recipe: Union[str, Recipe, None] = None, teacher: Optional[nn.Module] = None,
        steps: int, eval_data: Any = None, eval_every: Optional[int] = None, eval_seq_len: Optional[int] = None,
        patience: Optional[int] = None, distill: Optional[Distillation] = None, train: Any = None,
        lr: float = 1e-5, warmup_steps: int = 0, schedule: str = "cosine", min_lr_ratio: float = 0.1,
        optimizer: Any = "adamw", weight_decay: float = 0.0, grad_clip: Optional[float] = 1.0,
        grad_accumulation: int = 1, checkpoint_blocks: bool = False, dropout: bool = False, autocast: Any = None,
        backward: str = "straight_through", methods: Any = None, calibration_data: Any = None, exclude: Any = None,
        quantize_head: Optional[bool] = None, functional: Optional[bool] = None, parallel: Optional[str] = None,
        progress: bool = True, seed: int = 0) -> nn.Module:
    """Quantization-aware training by distillation (module doc); trains ``model`` in place and returns it.

    Args:
        data: training items, each a model input (``[batch, seq_len]`` token ids or a dict of
            keyword arguments with ``input_ids``); visited in a seeded random order, cycling.
        recipe: a recipe name or :class:`groupquant.nn.Recipe` to convert a float model with
            (None for a model that is already converted).
        teacher: the float reference; default a copy of the float ``model`` taken before conversion.
        steps: optimiser steps (> 0).
        eval_data: held-out 1-D token ids; its perplexity (windows of ``eval_seq_len``, default 512
            or less) is measured before training, every ``eval_every`` steps (default ``steps // 10``)
            and after the last, and the best evaluation's parameters are kept.
        patience: stop after this many evaluations in a row without a lower perplexity (None: never).
        distill: a :class:`~groupquant.calib.qat.Distillation` (default: KL on the logits, temperature 1).
        train: parts that train (:mod:`groupquant.calib.qat.trainable`; None: weights, norms, learned
            scales and rotation parameters where the model has them; embeddings and head frozen).
        lr, warmup_steps, schedule, min_lr_ratio: the :class:`~groupquant.calib.qat.Schedule`. A short run
            from a ptq model (whose weights sit on their grid) needs a peak ``lr`` that moves weights by
            half a grid step over the run: 2e-4 for a few hundred steps on SmolLM2-135M (docs/qat.md).
        optimizer: "adamw", "adam", "sgd" or a callable taking parameter groups; ``weight_decay``
            applies to matrices.
        grad_clip: largest global gradient norm (None: no clipping).
        grad_accumulation: micro-batches per optimiser step (per rank under DDP / FSDP2).
        checkpoint_blocks: recompute each block in backward instead of keeping its activations.
        dropout: keep the model's dropout while training (default False: every dropout module's
            probability is 0 during the run, :mod:`groupquant.calib.qat.dropout`).
        autocast: None (float32) or "bfloat16" for the training forward (held-out perplexity is float32).
        backward: "straight_through" (float gradients) or "recipe" (the recipe's quantized backward).
        methods, calibration_data, exclude, quantize_head, functional: :func:`groupquant.ptq`'s, for
            converting a float model (``calibration_data`` default: ``data``).
        parallel: under torch.distributed with more than one rank, None or "ddp" (the student
            wrapped in DistributedDataParallel) or "fsdp2" (a copy sharded with ``fully_shard``,
            block by block, gathered back into ``model`` at the end); "ddp" / "fsdp2" need an
            initialised process group (:mod:`groupquant.calib.qat.parallel`).
        progress: a tqdm bar (loss, last held-out perplexity) and the evaluation table at the end.
        seed: seeds the data order and torch's generator inside the call (restored afterwards).

    Returns the model, with ``model.qat_history`` (a list of :class:`~groupquant.calib.qat.StepRecord`)
    and ``model.qat_best_step`` (the step whose parameters it holds; None without ``eval_data``).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"qat: model must be a torch.nn.Module, got {type(model).__name__}")
    steps = _int_at_least("steps", steps, 1)
    grad_accumulation = _int_at_least("grad_accumulation", grad_accumulation, 1)
    eval_every = _int_at_least("eval_every", eval_every, 1, allow_none=True)
    patience = _int_at_least("patience", patience, 1, allow_none=True)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"qat: seed must be an int, got {seed!r}")
    if grad_clip is not None and (isinstance(grad_clip, bool) or not isinstance(grad_clip, (int, float))
                                  or not math.isfinite(grad_clip) or grad_clip <= 0):
        raise ValueError(f"qat: grad_clip must be a finite number > 0 or None, got {grad_clip!r}")
    mode = check_parallel(parallel, model)
    if backward not in BACKWARDS:
        raise ValueError(f"qat: backward must be one of {list(BACKWARDS)}, got {backward!r}")
    distill = Distillation() if distill is None else distill
    if not isinstance(distill, Distillation):
        raise TypeError(f"qat: distill must be a groupquant.calib.qat.Distillation, got {type(distill).__name__}")
    cfg_schedule = Schedule(lr, warmup_steps, schedule, min_lr_ratio)
    autocast_dtype = _autocast_dtype(autocast)
    vocab = vocabulary_size(model)
    items = check_training_data(data, vocab)
    eval_tokens, eval_seq_len = (None, None) if eval_data is None else check_eval_tokens(
        eval_data, vocab, eval_seq_len, context_length(model))
    converted = _is_converted(model)
    conversion = dict(methods=methods, calibration_data=calibration_data, exclude=exclude,
                      quantize_head=quantize_head, functional=functional)
    if converted:
        given = [k for k, v in conversion.items() if v is not None] + (["recipe"] if recipe is not None else [])
        if given:
            raise ValueError(f"qat: the model is already converted (it holds quant layers); {', '.join(given)} "
                             "apply only when qat converts a float model: leave them out")
        if teacher is None and distill.needs_teacher:
            raise ValueError("qat: an already converted model needs teacher=the float model to distil from")
    elif recipe is None:
        raise ValueError("qat: recipe=... is required to convert a float model (or pass a converted model and "
                         "teacher=...)")
    else:
        recipe = recipe_of(recipe)
    if teacher is not None:
        _check_teacher(teacher, model, vocab)
    calib_items = None
    if not converted and calibration_data is not None:
        calib_items = check_training_data(calibration_data, vocab, "calibration_data")
    cfg = TrainConfig(steps=steps, distill=distill, schedule=cfg_schedule, optimizer=optimizer,
                      weight_decay=weight_decay, grad_clip=grad_clip, grad_accumulation=grad_accumulation,
                      checkpoint_blocks=bool(checkpoint_blocks), dropout=_flag("dropout", dropout),
                      autocast=autocast_dtype,
                      eval_every=eval_every or max(1, steps // 10), eval_seq_len=eval_seq_len, patience=patience,
                      progress=progress, seed=seed)
    with torch.random.fork_rng(devices=_device_rng(model)):
        torch.manual_seed(seed)
        if not converted:
            if teacher is None and distill.needs_teacher:
                teacher = copy.deepcopy(model)
            r = _straight_through(recipe) if backward == "straight_through" else recipe
            model = ptq(model, calib_items or items, recipe=r, methods=methods, exclude=exclude, progress=progress,
                        seed=seed, functional=functional, quantize_head=quantize_head)
        trainable = select_trainable(model, train)
        with frozen_except(model, trainable):
            run = Parallel(model, trainable, mode)
            history, best = train_loop(Models(run.student, run.engine, teacher, run.release), items, eval_tokens,
                                       run.trainable, cfg)
            run.finish()
    model.qat_history = history
    model.qat_best_step = best
    if progress and eval_tokens is not None and world_and_rank()[1] == 0:
        print(format_history(history))
        print(f"kept the parameters of step {best}")
    return model

