"""The rank side of the qat data-parallel test: a tiny Llama trained by ``groupquant.qat`` on each rank."""
from __future__ import annotations

from typing import Any, Dict

import torch

#: the run both sides make: 2 ranks x 1 micro-batch per step, or 1 process x 2
STEPS = 4


def tiny_lm():
    """A 1-layer Llama (hidden 32, vocabulary 64), 6 training items of [1, 16] ids and 64 held-out ids."""
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                   initializer_range=0.2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 64, (1, 16), generator=g) for _ in range(6)]
    return model, data, torch.randint(0, 64, (64,), generator=g)


def run_qat(grad_accumulation: int) -> Dict[str, Any]:
    """``groupquant.qat`` on the tiny model; the trained state dict and the history."""
    import groupquant as gq
    model, data, held_out = tiny_lm()
    trained = gq.qat(model, data, recipe="mxfp4", methods=["gptq"], steps=STEPS, lr=1e-3, warmup_steps=1,
                     grad_accumulation=grad_accumulation, eval_data=held_out, eval_every=2, eval_seq_len=16,
                     progress=False, seed=3)
    return {"state": {k: v.clone() for k, v in trained.state_dict().items()}, "history": trained.qat_history,
            "best": trained.qat_best_step}


def rank_main(rank: int, world: int) -> Dict[str, Any]:
    """Each rank: one micro-batch per step (DDP averages the two ranks' gradients)."""
    return run_qat(grad_accumulation=1)
