"""The rank side of the qat data-parallel tests: a tiny Llama trained by ``groupquant.qat`` on each
rank, under DDP and under FSDP2 (``parallel="fsdp2"``)."""
from __future__ import annotations

import copy
from typing import Any, Dict, Optional

import torch

#: the run both sides make: 2 ranks x 1 micro-batch per step, or 1 process x 2
STEPS = 4
#: below every step's gradient norm of the run (0.52 to 0.91 measured), so clipping acts at every step
CLIP = 0.25


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


def _sharded_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` sharded with FSDP2 as a user would: each decoder layer, then the root."""
    from torch.distributed.fsdp import fully_shard
    copied = copy.deepcopy(model)
    for layer in copied.model.layers:
        fully_shard(layer)
    return fully_shard(copied)


def run_qat(grad_accumulation: int, parallel: Optional[str] = None, grad_clip: Optional[float] = CLIP,
            pack: bool = False, checkpoint_blocks: bool = False, shard_teacher: bool = False) -> Dict[str, Any]:
    """``groupquant.qat`` on the tiny model; the trained state dict, the history, and (``pack``)
    what the returned model is: its class, whether any tensor of it is a DTensor, its logits and
    those of ``pack_model`` of it on the held-out ids. ``shard_teacher``: the teacher given is a
    sharded copy of the float model (by default qat copies the float model, whole, on each rank)."""
    import groupquant as gq
    model, data, held_out = tiny_lm()
    teacher = _sharded_copy(model) if shard_teacher else None
    trained = gq.qat(model, data, recipe="mxfp4", methods=["gptq"], steps=STEPS, lr=1e-3, warmup_steps=1,
                     grad_accumulation=grad_accumulation, grad_clip=grad_clip, eval_data=held_out, eval_every=2,
                     eval_seq_len=16, progress=False, seed=3, parallel=parallel, teacher=teacher,
                     checkpoint_blocks=checkpoint_blocks)
    out = {"state": {k: v.clone() for k, v in trained.state_dict().items()}, "history": trained.qat_history,
           "best": trained.qat_best_step, "same_object": trained is model}
    if pack:
        ids = held_out[:32][None]
        with torch.no_grad():
            out["class"] = type(trained).__name__
            out["dtensors"] = [k for k, v in trained.state_dict().items() if hasattr(v, "full_tensor")]
            out["logits"] = trained.eval()(ids).logits
            out["packed_logits"] = gq.pack_model(copy.deepcopy(trained))(ids).logits
    return out


def _refusal_of_a_sharded_model() -> str:
    """The error qat raises for a student the caller already sharded with ``fully_shard``."""
    import groupquant as gq
    model, data, _ = tiny_lm()
    model = _sharded_copy(model)
    try:
        gq.qat(model, data, recipe="mxfp4", steps=1, progress=False, parallel="fsdp2")
    except ValueError as err:
        return str(err)
    return "no error"


def rank_main(rank: int, world: int) -> Dict[str, Any]:
    """Each rank: one micro-batch per step under DDP (the default parallel, clipping at every step)
    and under FSDP2 (without clipping, and with), two per step under both (accumulated on the rank
    first, no clipping), FSDP2 with its blocks checkpointed and with a teacher the caller sharded,
    and the refusal of an already sharded student."""
    return {"ddp": run_qat(1), "fsdp2": run_qat(1, "fsdp2", grad_clip=None, pack=True),
            "fsdp2_checkpointed": run_qat(1, "fsdp2", grad_clip=None, checkpoint_blocks=True),
            "fsdp2_sharded_teacher": run_qat(1, "fsdp2", grad_clip=None, shard_teacher=True),
            "fsdp2_clip": run_qat(1, "fsdp2"), "ddp_acc": run_qat(2, "ddp", grad_clip=None),
            "fsdp2_acc": run_qat(2, "fsdp2", grad_clip=None), "refused": _refusal_of_a_sharded_model()}
