"""Fixtures for the training tests: a tiny random Llama whose sharp logits make quantization matter,
text sampled from it (so the float model is the best model of its own text), one thread."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the training tests use a tiny transformers Llama")


@dataclass
class TinyLM:
    """A float model, training items (``[2, 32]`` token ids) and held-out tokens, all from one seed."""

    model: torch.nn.Module
    data: List[torch.Tensor]
    held_out: torch.Tensor
    vocab: int = 64


def make_tiny_lm(seed: int = 0, hidden: int = 64, layers: int = 2, items: int = 16) -> TinyLM:
    """Llama (hidden ``hidden``, ``layers`` layers, vocabulary 64, initializer range 0.2 for peaked
    outputs); ``items`` training items and 4 x 32 held-out tokens sampled from it."""
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                                   max_position_embeddings=64, initializer_range=0.2)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    start = torch.zeros(2 * items + 4, 1, dtype=torch.long)
    with torch.no_grad():
        text = model.generate(start, do_sample=True, max_new_tokens=31, min_new_tokens=31, pad_token_id=None,
                              eos_token_id=None)
    data = [text[i:i + 2] for i in range(0, 2 * items, 2)]
    return TinyLM(model, data, text[2 * items:].reshape(-1))


@pytest.fixture
def tiny_lm():
    """``tiny_lm(seed=0, hidden=64, layers=2, items=16)`` -> :class:`TinyLM`."""
    return make_tiny_lm


@pytest.fixture(autouse=True)
def _every_test_on_one_thread(one_thread):
    """Every training test runs on one thread (tests/conftest.py's ``one_thread``)."""
