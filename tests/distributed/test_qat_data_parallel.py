"""groupquant.qat under DDP and FSDP2 (2 gloo processes) against one process.

One micro-batch per rank per step computes what one process computes with two micro-batches per
step: under DDP the same weights bit for bit and the same history (gradient clipping acting at
every step); under ``parallel="fsdp2"`` the same bit for bit without clipping, and within a few
float32 ulps with clipping (the norm of the sharded gradients sums its squares in another order).
Two micro-batches per rank under FSDP2 (accumulated on the rank, reduce-scattered on the last)
equal two under DDP bit for bit; checkpointed blocks and a sharded teacher change nothing.
"""
from __future__ import annotations

import functools
import math

import pytest
import torch

import qat_worker
from spawn import run_ranks, skip_reason

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))
pytest.importorskip("transformers")

EPS = torch.finfo(torch.float32).eps


@functools.lru_cache(maxsize=1)
def _ranks(tmp: str):
    return run_ranks(qat_worker.rank_main, tmp, timeout=240)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return _ranks(str(tmp_path_factory.mktemp("qat_ranks")))


@functools.lru_cache(maxsize=2)
def _one_process(grad_clip):
    """One process, two micro-batches per step (the two ranks' one each), one thread as the ranks run."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return qat_worker.run_qat(2, grad_clip=grad_clip)
    finally:
        torch.set_num_threads(threads)


def _assert_equal_runs(got, want, where):
    assert got["history"] == want["history"], where
    assert got["best"] == want["best"], where
    assert got["state"].keys() == want["state"].keys(), where
    for key, value in want["state"].items():
        assert torch.equal(got["state"][key], value), (where, key)


@pytest.mark.parametrize("parallel,grad_clip", [("ddp", qat_worker.CLIP), ("fsdp2", None)])
def test_two_ranks_equal_one_process_accumulating_their_micro_batches(ranks, parallel, grad_clip):
    one = _one_process(grad_clip)
    for r, out in enumerate(ranks):
        _assert_equal_runs(out[parallel], one, (parallel, r))
        assert out[parallel]["same_object"]  # qat trains the caller's model in place and returns it
    assert len(one["history"]) == qat_worker.STEPS + 1 and one["history"][-1].loss is not None
    assert one["best"] not in (None, 0)  # the kept parameters are trained ones (restored from a snapshot)
    # (each rank alone would train on other micro-batches than the other rank: equal weights need the average)


def test_fsdp2_with_clipping_stays_within_float32_rounding_of_one_process(ranks):
    """clip_grad_norm_ on FSDP2's sharded (DTensor) gradients: each rank's squares, then an
    all-reduce, so the norm may differ from one process's by an ulp or two, and the clipping
    factor with it. AdamW's update is normalised (m / sqrt(v)), so a factor a few ulps off moves
    each step's update by a few eps relative: each weight may differ by a few ulps of itself plus
    ``steps * lr`` times a few eps. Losses and perplexities: float32 sums over a few hundred
    terms of logits from those weights."""
    one = _one_process(qat_worker.CLIP)
    atol = qat_worker.STEPS * 1e-3 * 8 * EPS  # lr 1e-3
    for out in ranks:
        got = out["fsdp2_clip"]
        for key, value in one["state"].items():
            torch.testing.assert_close(got["state"][key], value, rtol=4 * EPS, atol=atol, msg=key)
        assert got["best"] == one["best"]
        for mine, ref in zip(got["history"], one["history"], strict=True):
            assert (mine.step, mine.lr) == (ref.step, ref.lr)
            for a, b in ((mine.loss, ref.loss), (mine.perplexity, ref.perplexity), (mine.kl, ref.kl)):
                assert (a is None) == (b is None)
                assert a is None or math.isclose(a, b, rel_tol=64 * EPS), (mine, ref)


def test_fsdp2_returns_the_unsharded_model_whose_packed_form_computes_the_same_logits(ranks):
    for out in ranks:
        run = out["fsdp2"]
        assert run["class"] == "LlamaForCausalLM" and run["dtensors"] == []
        assert torch.equal(run["packed_logits"], run["logits"])
    assert torch.equal(ranks[0]["fsdp2"]["logits"], ranks[1]["fsdp2"]["logits"])


def test_fsdp2_accumulates_on_the_rank_and_reduces_once_as_ddp_does(ranks):
    """Rank r accumulates micro-batches r and r + 2 of each step's four and the ranks average once
    (FSDP2's set_requires_gradient_sync(False) before the last): DDP's sums, bit for bit."""
    for r, out in enumerate(ranks):
        _assert_equal_runs(out["fsdp2_acc"], out["ddp_acc"], r)
    key = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(ranks[0]["fsdp2_acc"]["state"][key], ranks[0]["fsdp2"]["state"][key])


def test_fsdp2_with_checkpointed_blocks_or_a_sharded_teacher_computes_the_same(ranks):
    """Blocks recomputed in backward inside their FSDP2 units (gathered again for the recomputation),
    and a teacher the caller sharded with fully_shard (every rank runs its forward), change nothing."""
    for r, out in enumerate(ranks):
        _assert_equal_runs(out["fsdp2_checkpointed"], out["fsdp2"], ("checkpointed", r))
        _assert_equal_runs(out["fsdp2_sharded_teacher"], out["fsdp2"], ("sharded teacher", r))


def test_a_student_sharded_by_the_caller_is_refused(ranks):
    for out in ranks:
        assert "the model is already sharded with fully_shard" in out["refused"]
        assert "parallel='fsdp2'" in out["refused"]
