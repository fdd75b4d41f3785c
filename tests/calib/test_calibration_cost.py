"""The work of ``groupquant.ptq`` grows linearly with the calibration items (issue 31: time at most
linear in the calibration tokens), counted, not timed: block forward passes and Hessian products
per item are constants, and layers reading one tensor share its product (their Hessians are the
ones each would accumulate alone, bit for bit)."""
from __future__ import annotations

from typing import Dict, List

import pytest
import torch

import groupquant as gq
from groupquant.calib import hessian
from groupquant.calib.blocks import capture_block_inputs, find_blocks, run_block
from groupquant.calib.hessian import HessianAccumulator, SharedInputs
from groupquant.calib.rotate import rotate_model

from .tiny_models import VOCAB, llama


def _items(n: int, seed: int = 3) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (1, 16), generator=g) for _ in range(n)]


def _count_work(n: int, monkeypatch: pytest.MonkeyPatch) -> Dict[str, int]:
    """Block forward calls and Hessian products of ``ptq`` (mxfp4, its default methods) on ``n`` items."""
    model = llama(seed=0)
    _, blocks = find_blocks(model)
    counts = {"block forwards": 0, "hessian products": 0}

    def count_block(module, args, kwargs):
        counts["block forwards"] += 1

    handles = [b.register_forward_pre_hook(count_block, with_kwargs=True) for b in blocks]
    real = hessian.input_product

    def counting_product(x):
        counts["hessian products"] += 1
        return real(x)

    with monkeypatch.context() as patch:
        patch.setattr(hessian, "input_product", counting_product)
        try:
            gq.ptq(model, _items(n), recipe="mxfp4", exclude=["lm_head"], progress=False)
        finally:
            for h in handles:
                h.remove()
    return counts


def test_block_forwards_and_hessian_products_per_item_are_constants(monkeypatch) -> None:
    work = {n: _count_work(n, monkeypatch) for n in (2, 3, 5)}
    blocks = 2
    for what in ("block forwards", "hessian products"):
        per_item = work[3][what] - work[2][what]
        assert per_item > 0
        assert work[5][what] - work[3][what] == 2 * per_item, (what, work)  # affine in the items: no n^2 term
    # per item and block: smooth's recording pass, the Hessian feed, the calibrated block's replay
    # (not after the last block), and the capture of the first block's inputs (stopped in its pre-hook)
    assert work[3]["block forwards"] - work[2]["block forwards"] == 3 * blocks - 1 + 1
    # Llama block: q / k / v read one tensor, gate / up another; o and down one each
    assert work[3]["hessian products"] - work[2]["hessian products"] == 4 * blocks


def _block_hessians(model, items, shared):
    """H of every quant linear of the first block, accumulated with (or without) a shared memo."""
    _, blocks = find_blocks(model)
    block = blocks[0]
    layers = {n: m for n, m in block.named_modules() if hasattr(m, "weight_quant")}
    memo = SharedInputs() if shared else None
    accs = {n: HessianAccumulator(m, memo).attach() for n, m in layers.items()}
    inputs = capture_block_inputs(model, block, items)
    run_block(model, block, inputs)
    for acc in accs.values():
        acc.detach()
    return {n: a.hessian() for n, a in accs.items()}, memo


@pytest.mark.parametrize("rotate", [False, True])
def test_layers_reading_one_tensor_share_its_product_and_get_the_hessian_they_would_alone(rotate) -> None:
    k_proj = "model.layers.0.self_attn.k_proj"
    model = gq.quantize_model(llama(seed=1), recipe="mxfp4", exclude=["lm_head", k_proj], functional=False)
    # k_proj's inputs quantized otherwise (MXFP8): it reads q's tensor but must not take q's product
    gq.quantize_model(model, recipe="mxfp8", include=[k_proj], functional=False)
    if rotate:
        rotate_model(model, exclude=["lm_head"])
    items = _items(2)
    alone, _ = _block_hessians(model, items, shared=False)
    together, memo = _block_hessians(model, items, shared=True)
    for name in alone:
        assert torch.equal(alone[name], together[name]), name
    # per item: q / v, k, o, gate / up, down
    assert memo.computed == 5 * len(items)
    assert not torch.equal(alone["self_attn.q_proj"], alone["self_attn.k_proj"])
    assert torch.equal(alone["self_attn.q_proj"], alone["self_attn.v_proj"])


def test_a_tensor_changed_in_place_is_not_taken_from_the_memo() -> None:
    layer = gq.quantize_model(torch.nn.Sequential(torch.nn.Linear(32, 8)), recipe="mxfp4", functional=False)[0]
    memo = SharedInputs()
    acc = HessianAccumulator(layer, memo)
    x = torch.randn(4, 32)
    acc._hook(layer, (x,))
    x.mul_(2.0)
    acc._hook(layer, (x,))
    assert memo.computed == 2
    ref = HessianAccumulator(layer)
    ref.add(layer.input_quant.quant_value(x / 2.0))
    ref.add(layer.input_quant.quant_value(x))
    assert torch.equal(acc.sum, ref.sum) and acc.tokens == 8
