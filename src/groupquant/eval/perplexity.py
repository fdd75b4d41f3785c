"""perplexity: exp of the mean token negative log-likelihood over non-overlapping windows."""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["perplexity", "context_length", "vocabulary_size"]


def context_length(model: nn.Module) -> Optional[int]:
    """The longest sequence the model takes (``config.max_position_embeddings``), None if unknown."""
    n = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(n) if isinstance(n, int) else None


def vocabulary_size(model: nn.Module) -> Optional[int]:
    """The number of token ids the model takes (``config.vocab_size``), None if unknown."""
    n = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(n) if isinstance(n, int) else None


def _flat_tokens(token_ids) -> torch.Tensor:
    ids = torch.as_tensor(token_ids)
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"perplexity: token_ids must be a 1-D sequence of integer token ids (or [1, N]), got shape "
                         f"{tuple(ids.shape)} dtype {ids.dtype}")
    return ids.long()


def perplexity(model: nn.Module, token_ids, *, seq_len: int, progress: bool = True) -> float:
    """``exp(mean NLL)`` of a causal language model on ``token_ids`` (1-D), split into
    ``len // seq_len`` non-overlapping windows of ``seq_len`` tokens (a shorter tail is dropped).
    Each window is one forward pass ``model(window[None])`` (its ``.logits`` or the tensor
    returned); its first token is context only, so every window scores ``seq_len - 1``
    next-token predictions and the mean is over all of them (float64 accumulation).

    ValueError when ``seq_len`` < 2, when the text holds fewer than ``seq_len`` tokens, when
    ``seq_len`` exceeds the model's context (``config.max_position_embeddings``), or when a token id
    lies outside the model's vocabulary (``config.vocab_size``). The model runs in eval mode (no
    dropout) and gets its training mode back afterwards.
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 2:
        raise ValueError(f"perplexity: seq_len must be an int >= 2 (tokens per window), got {seq_len!r}")
    ids = _flat_tokens(token_ids)
    context = context_length(model)
    if context is not None and seq_len > context:
        raise ValueError(f"perplexity: seq_len={seq_len} is longer than the model's context "
                         f"(max_position_embeddings={context}); use seq_len <= {context}")
    vocab = vocabulary_size(model)
    if ids.numel() and (int(ids.min()) < 0 or (vocab is not None and int(ids.max()) >= vocab)):
        raise ValueError(f"perplexity: token ids must lie in [0, vocab_size={vocab}), got ids from {int(ids.min())} to "
                         f"{int(ids.max())}; were they made by another model's tokenizer?")
    windows = ids.numel() // seq_len
    if windows == 0:
        raise ValueError(f"perplexity: the text has {ids.numel()} tokens, fewer than one window of seq_len={seq_len}; "
                         "give more text or a shorter seq_len")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    starts = range(0, windows * seq_len, seq_len)
    if progress:
        try:
            from tqdm import tqdm
            starts = tqdm(starts, desc="perplexity", leave=False)
        except ImportError:
            pass
    total = 0.0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in starts:
                window = ids[start:start + seq_len].to(device)
                out = model(window[None])
                logits = getattr(out, "logits", out)[0, :-1].double()
                total += float(F.cross_entropy(logits, window[1:], reduction="sum"))
    finally:
        model.train(was_training)
    return math.exp(total / (windows * (seq_len - 1)))
