"""groupquant.qat under DDP (2 gloo processes, one micro-batch each per step) computes what one
process computes with two micro-batches per step: the same weights bit for bit, the same history."""
from __future__ import annotations

import pytest
import torch

import qat_worker
from spawn import run_ranks, skip_reason

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))
pytest.importorskip("transformers")


def test_two_ranks_equal_one_process_accumulating_their_micro_batches(tmp_path):
    ranks = run_ranks(qat_worker.rank_main, str(tmp_path), timeout=240)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks run
    try:
        one = qat_worker.run_qat(grad_accumulation=2)
    finally:
        torch.set_num_threads(threads)
    for r, out in enumerate(ranks):
        assert out["history"] == one["history"], r
        assert out["best"] == one["best"]
        assert out["state"].keys() == one["state"].keys()
        for key, value in one["state"].items():
            assert torch.equal(out["state"][key], value), (r, key)
    assert len(one["history"]) == qat_worker.STEPS + 1 and one["history"][-1].loss is not None
    # (each rank alone would train on other micro-batches than the other rank: equal weights need DDP's average)
