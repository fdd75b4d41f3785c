"""Training data checks and the micro-batch order across ranks."""
from __future__ import annotations

import pytest
import torch

from groupquant.calib.qat.data import MicroBatchOrder, check_eval_tokens, check_training_data


def test_ranks_with_accumulation_see_the_micro_batches_of_one_process():
    one = MicroBatchOrder(10, seed=3, accumulation=4)
    ranks = [MicroBatchOrder(10, seed=3, accumulation=2, world=2, rank=r) for r in range(2)]
    for step in range(7):
        got = [ranks[r].items_of_step(step)[j] for j in range(2) for r in range(2)]
        assert got == one.items_of_step(step)
    seen = [i for step in range(5) for i in one.items_of_step(step)]  # 20 micro-batches: two passes
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))
    assert seen[:10] != seen[10:]  # a new order per pass
    assert MicroBatchOrder(10, seed=3, accumulation=4).items_of_step(2) == one.items_of_step(2)


@pytest.mark.parametrize("data,match", [
    ([], "data is empty"),
    (torch.zeros(2, 8, dtype=torch.long), "got a single Tensor; wrap it in a list"),
    ([torch.zeros(8, dtype=torch.long)], r"token ids must be an integer tensor \[batch, seq_len\], got shape \(8,\)"),
    ([torch.zeros(2, 8)], "a language model \\(vocab_size=64\\) takes integer token ids"),
    ([torch.full((2, 8), 64)], r"token ids must lie in \[0, vocab_size=64\), got ids from 64 to 64"),
    ([torch.zeros(2, 1, dtype=torch.long)], "have no next token to predict"),
    ([{"inputs_embeds": torch.tensor([[[float("nan")]]])}], r"item 0 \['inputs_embeds'\] holds 1 non-finite value"),
])
def test_bad_training_data_is_named(data, match):
    with pytest.raises((TypeError, ValueError), match=match):
        check_training_data(data, 64)


def test_a_model_without_a_vocabulary_takes_finite_float_inputs():
    assert len(check_training_data([torch.randn(2, 4)], None)) == 1
    with pytest.raises(ValueError, match=r"item 1 holds 1 non-finite value"):
        check_training_data([torch.randn(2, 4), torch.tensor([[float("inf")]])], None)


def test_held_out_tokens():
    ids, seq = check_eval_tokens(torch.arange(100)[None] % 64, 64, None, 64)
    assert ids.shape == (100,) and seq == 64
    with pytest.raises(ValueError, match="must be 1-D integer token ids"):
        check_eval_tokens(torch.zeros(3, 5, dtype=torch.long), 64, None, 64)
    with pytest.raises(ValueError, match=r"eval_seq_len=...\) must be an int in \[2, 100\]"):
        check_eval_tokens(torch.zeros(100, dtype=torch.long), 64, 200, 512)
    with pytest.raises(ValueError, match="longer than the model's context"):
        check_eval_tokens(torch.zeros(100, dtype=torch.long), 64, 80, 64)
