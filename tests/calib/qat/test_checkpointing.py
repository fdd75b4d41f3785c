"""Activation checkpointing of the blocks: the same gradients as without it, the quantized attention included."""
from __future__ import annotations

import pytest
import torch

import groupquant as gq
from groupquant.calib.qat.checkpointing import checkpointed_blocks


def _grads(model, ids):
    model.zero_grad(set_to_none=True)
    model(ids, use_cache=False).logits.square().mean().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_checkpointed_blocks_give_the_same_gradients_bit_for_bit(tiny_lm):
    lm = tiny_lm(layers=2)
    model = gq.quantize_model(lm.model, recipe="mxfp4", quantize_head=False).train()  # W + A: attention GEMMs too
    ids = lm.data[0]
    plain = _grads(model, ids)
    with checkpointed_blocks(model) as blocks:
        assert len(blocks) == 2 and "forward" in vars(blocks[0])
        recomputed = _grads(model, ids)
    assert "forward" not in vars(blocks[0])  # the class's forward is back
    assert plain.keys() == recomputed.keys() and len(plain) > 10
    for name in plain:
        assert torch.equal(plain[name], recomputed[name]), name


def test_recomputation_enters_the_functional_mode_again(tiny_lm, monkeypatch):
    """Without re-entering the mode in backward the recomputed attention would be float (its
    saved tensors differ), so counting the mode's quantized products shows the recomputation ran in it."""
    lm = tiny_lm(layers=1)
    model = gq.quantize_model(lm.model, recipe="mxfp4", quantize_head=False).train()
    quantizers = gq.nn.functional.functional_mode.functional_quantizers(model)
    calls = []
    product = quantizers.product
    monkeypatch.setattr(quantizers, "product", lambda *a: calls.append(1) or product(*a))
    _grads(model, lm.data[0])
    forward_only = len(calls)
    calls.clear()
    with checkpointed_blocks(model):
        _grads(model, lm.data[0])
    assert forward_only == 2 and len(calls) == 2 * forward_only


def test_a_model_without_blocks_is_refused():
    with pytest.raises(ValueError, match="checkpoint_blocks=True\\): the model has no repeated blocks"):
        with checkpointed_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2))):
            pass
