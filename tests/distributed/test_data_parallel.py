"""DDP and FSDP2 in 2 gloo processes against one process that accumulates the per-rank halves.

One spawned run (``workers.rank_main``) covers every scenario; each test below checks one part of
it against a single-process reference computed here (with one thread, as the ranks use).
"""
from __future__ import annotations

import functools

import pytest
import torch

import workers
from spawn import run_ranks, skip_reason

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))


@functools.lru_cache(maxsize=1)
def _ranks(tmp: str):
    return run_ranks(workers.rank_main, tmp, timeout=240)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return _ranks(str(tmp_path_factory.mktemp("ranks")))


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _assert_equal_dicts(got, want):
    assert set(got) == set(want)
    for name in want:
        assert torch.equal(got[name], want[name]), name


@pytest.mark.parametrize("kind", ["plain", "recipe"])
@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_gradients_and_steps_equal_one_process_accumulating_halves(ranks, kind, wrap):
    ref = workers.reference_steps(workers.mlp(kind), steps=2)
    for out in ranks:
        _assert_equal_dicts(out[f"{wrap}_{kind}_grads"], ref["grads"])
        _assert_equal_dicts(out[f"{wrap}_{kind}_params"], ref["params"])
