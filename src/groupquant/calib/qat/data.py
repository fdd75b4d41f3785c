"""Training data of quantization-aware training: the checks, the token ids and mask of an item,
and which item each rank takes at each micro-step.

An item is a model input as :func:`groupquant.ptq` takes it (:func:`groupquant.calib.blocks.check_calibration_data`):
a tensor (``model(x)``) or a dict of keyword arguments (``model(**kw)``). For a language model
(one with ``config.vocab_size``) an item is ``[batch, seq_len]`` integer token ids, or a dict with
``input_ids`` of that kind (and optionally ``attention_mask``); ids must lie in the vocabulary.
Every floating-point tensor must be finite.

Order: each pass over the data visits the items in a permutation drawn from a generator seeded
with ``seed`` (a new permutation per pass). Optimiser step ``k`` takes ``accumulation * world``
micro-batches, positions ``k * accumulation * world + j * world + rank`` of that sequence
(``j < accumulation``), so a run on ``world`` data-parallel ranks with ``accumulation`` micro-batches
each sees exactly the micro-batches of one process with ``accumulation * world`` (see docs/qat.md).
"""
from __future__ import annotations

from typing import Any, List, Optional

import torch

from ..blocks import check_calibration_data

__all__ = ["check_training_data", "token_ids_of", "mask_of", "MicroBatchOrder", "to_device", "call",
           "check_eval_tokens"]


def token_ids_of(item: Any) -> Optional[torch.Tensor]:
    """The item's token ids (an integer tensor item, or a dict's ``input_ids``), or None."""
    ids = item.get("input_ids") if isinstance(item, dict) else item
    if isinstance(ids, torch.Tensor) and not ids.is_floating_point() and not ids.is_complex():
        return ids
    return None


def mask_of(item: Any) -> Optional[torch.Tensor]:
    """The item's ``attention_mask`` (a dict's), or None."""
    mask = item.get("attention_mask") if isinstance(item, dict) else None
    return mask if isinstance(mask, torch.Tensor) else None


def _check_ids(ids: torch.Tensor, vocab: int, where: str) -> None:
    if ids.dtype == torch.bool or ids.dim() != 2:
        raise ValueError(f"{where}: token ids must be an integer tensor [batch, seq_len], got shape {tuple(ids.shape)} "
                         f"dtype {ids.dtype}")
    if ids.shape[1] < 2:
        raise ValueError(f"{where}: sequences of {ids.shape[1]} token(s) have no next token to predict; give "
                         "seq_len >= 2")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        raise ValueError(f"{where}: token ids must lie in [0, vocab_size={vocab}), got ids from {low} to {high}; were "
                         "they made by another model's tokenizer?")


def check_training_data(data: Any, vocab: Optional[int], name: str = "data") -> List[Any]:
    """``data`` as a list of items (module doc's rules); ``vocab``: the model's vocabulary size, or
    None for a model that is not a language model. Errors name ``name`` and the item."""
    try:
        items = check_calibration_data(data)
    except (TypeError, ValueError) as err:
        raise type(err)(f"qat({name}=...): {err}".replace("calibration_data", name)) from None
    for index, item in enumerate(items):
        where = f"qat({name}=...) item {index}"
        tensors = item.items() if isinstance(item, dict) else [("", item)]
        for key, t in tensors:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise ValueError(f"{where}{f' {key!r}' if key else ''}: holds NaN or Inf")
        if vocab is None:
            continue
        ids = token_ids_of(item)
        if ids is None and not (isinstance(item, dict) and "inputs_embeds" in item):
            given = f"a {item.dtype} tensor" if isinstance(item, torch.Tensor) else f"a dict of {sorted(item)}"
            raise ValueError(f"{where}: a language model (vocab_size={vocab}) takes integer token ids [batch, seq_len] "
                             f"(a tensor, or a dict with 'input_ids'), got {given}")
        if ids is not None:
            _check_ids(ids, vocab, where)
    return items


def check_eval_tokens(eval_data: Any, vocab: Optional[int], seq_len: Optional[int],
                      context: Optional[int]) -> tuple:
    """``(tokens, seq_len)``: held-out text as 1-D integer token ids (or ``[1, N]``) for
    :func:`groupquant.eval.perplexity`, and its window length (None: the shorter of 512 tokens, the
    model's context and the text). ValueErrors name ``eval_data`` / ``eval_seq_len``."""
    ids = torch.as_tensor(eval_data) if not isinstance(eval_data, torch.Tensor) else eval_data
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"qat(eval_data=...) must be 1-D integer token ids (or [1, N]) of held-out text, got shape "
                         f"{tuple(ids.shape)} dtype {ids.dtype}")
    if vocab is None:
        raise ValueError("qat(eval_data=...) measures perplexity, which needs a language model (config.vocab_size)")
    if ids.numel() < 2:
        raise ValueError(f"qat(eval_data=...) holds {ids.numel()} token(s); perplexity needs at least 2")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise ValueError(f"qat(eval_data=...): token ids must lie in [0, vocab_size={vocab}), got ids from "
                         f"{int(ids.min())} to {int(ids.max())}")
    if seq_len is None:
        seq_len = min(512, ids.numel(), context or 512)
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or not 2 <= seq_len <= ids.numel():
        raise ValueError(f"qat(eval_seq_len=...) must be an int in [2, {ids.numel()}] (the held-out tokens), "
                         f"got {seq_len!r}")
    if context is not None and seq_len > context:
        raise ValueError(f"qat(eval_seq_len={seq_len}) is longer than the model's context ({context} tokens)")
    return ids.long(), seq_len


class MicroBatchOrder:
    """Which item a rank takes at each micro-step (module doc): a permutation per pass over
    ``count`` items, drawn from a generator seeded with ``seed``."""

    def __init__(self, count: int, seed: int, accumulation: int, world: int = 1, rank: int = 0) -> None:
        self.count, self.accumulation, self.world, self.rank = count, accumulation, world, rank
        self.generator = torch.Generator().manual_seed(seed)
        self.passes: List[torch.Tensor] = []

    def _position(self, position: int) -> int:
        while position // self.count >= len(self.passes):
            self.passes.append(torch.randperm(self.count, generator=self.generator))
        return int(self.passes[position // self.count][position % self.count])

    def items_of_step(self, step: int) -> List[int]:
        """The item indices this rank takes at optimiser step ``step``, in order."""
        base = step * self.accumulation * self.world
        return [self._position(base + j * self.world + self.rank) for j in range(self.accumulation)]


def to_device(item: Any, device: torch.device) -> Any:
    """The item with its tensors on ``device``."""
    if isinstance(item, dict):
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in item.items()}
    return item.to(device)


def call(model: torch.nn.Module, item: Any, extra: dict) -> Any:
    """``model(item, **extra)`` / ``model(**item, **extra)`` (``extra``: e.g. ``output_hidden_states=True``)."""
    if isinstance(item, dict):
        return model(**item, **extra)
    return model(item, **extra)
