"""What each rank runs in the 2-process tests, and the single-process references they are held to.

Every model is built from a seed, so the ranks and the reference start from the same values. The
whole batch ``X`` has 2 sequences of 16 tokens; rank r trains on ``X[r:r+1]`` (16 tokens per rank,
half an MX block along the tokens). The reference "accumulates the per-rank halves": it runs each
half alone and averages the two gradients, which is what DDP's and FSDP2's mean reduction compute.
"""
from __future__ import annotations

import os
import traceback
import warnings
import tempfile
from typing import Any, Dict, List

import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.core import stat_sync
from groupquant.nn import QuantLinear
from groupquant.proxy import WeightQuantProxy
from groupquant.quantizers import Int8ActPerTensor, LearnedScaling, MXFloat4e2m1Weight, MXFloat8e4m3Act

D = 64


class LearnedMXFP4Weight(LearnedScaling, MXFloat4e2m1Weight):
    """MXFP4 weight with learned E8M0 group scales."""


class LearnedInt8ActPerTensor(LearnedScaling, Int8ActPerTensor):
    """Int8 activations with one learned per-tensor scale."""


class LearnedMXFP8Act(LearnedScaling, MXFloat8e4m3Act):
    """MXFP8 activations with learned per-group scales (their shape: the batch's)."""


def batch(step: int = 0) -> torch.Tensor:
    """The whole batch of a step, [2, 16, D], with rows spanning binades (rank r takes row r)."""
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(2, 16, D, generator=g) * torch.logspace(-2, 3, D, base=2.0)


def mlp(kind: str) -> nn.Module:
    """The model of a scenario, built the same on every process (seeded)."""
    torch.manual_seed(0)
    if kind in ("recipe", "plain"):
        model = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, 32))
        if kind == "recipe":
            gq.quantize_model(model, recipe="mxfp4_fwd_mxfp8_bwd")
        else:
            gq.quantize_model(model, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act)
        return model
    if kind == "learned_weight":
        model = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, 32))
        gq.quantize_model(model, weight_quant=LearnedMXFP4Weight)
        return model
    if kind == "learned_act_tensor":
        return nn.Sequential(QuantLinear(D, 32, input_quant=LearnedInt8ActPerTensor))
    if kind == "learned_act_group":
        return nn.Sequential(QuantLinear(D, 32, input_quant=LearnedMXFP8Act))
    if kind == "running":
        return nn.Sequential(QuantLinear(D, D, input_quant=Int8ActPerTensor), nn.GELU(),
                             QuantLinear(D, 32, input_quant=Int8ActPerTensor))
    raise ValueError(kind)


class Block(nn.Module):
    """A small pre-norm transformer block: attention (SDPA) and an MLP, for the recipe under compile."""

    def __init__(self, d: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.norm = heads, nn.LayerNorm(d)
        self.qkv, self.out, self.ff = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(self.norm(x)).split(d, -1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(F.gelu(x))


def block(recipe: str = "mxfp8") -> nn.Module:
    """The block with ``recipe`` on its layers and its functional calls (seeded)."""
    torch.manual_seed(0)
    model = Block()
    gq.quantize_model(model, recipe=recipe, functional=True)
    return model


def loss_of(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).square().mean()


def grads(model: nn.Module) -> Dict[str, torch.Tensor]:
    return {n: _full(p.grad).clone() for n, p in model.named_parameters() if p.grad is not None}


def params(model: nn.Module) -> Dict[str, torch.Tensor]:
    return {n: _full(p.detach()).clone() for n, p in model.named_parameters()}


def buffers(model: nn.Module) -> Dict[str, torch.Tensor]:
    return {n: b.detach().clone() for n, b in model.named_buffers()}


def _full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's full value (FSDP2), or the tensor."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def train_steps(model: nn.Module, xs: List[torch.Tensor], lr: float = 0.05) -> List[float]:
    """SGD on ``xs`` (one tensor per step), the losses."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for x in xs:
        opt.zero_grad()
        loss = loss_of(model, x)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def reference_steps(model: nn.Module, steps: Any, lr: float = 0.05) -> Dict[str, Any]:
    """One process accumulating the per-rank halves: each half's gradient alone, averaged; SGD
    (``steps``: how many, on batches 0, 1, ..., or the list of batch numbers)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    first_grads = None
    for step in (range(steps) if isinstance(steps, int) else steps):
        halves = []
        for r in range(2):
            opt.zero_grad()
            loss_of(model, batch(step)[r:r + 1]).backward()
            halves.append(grads(model))
        mean = {n: (halves[0][n] + halves[1][n]) / 2 for n in halves[0]}
        first_grads = first_grads or mean
        for n, p in model.named_parameters():
            p.grad = mean[n].clone() if n in mean else None
        opt.step()
    return {"grads": first_grads, "params": params(model)}


# ---------------------------------------------------------------------------------------------
# what the ranks run


def _ddp(model: nn.Module) -> nn.Module:
    return nn.parallel.DistributedDataParallel(model)


def _fsdp(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard
    for layer in model:
        if any(True for _ in layer.parameters(recurse=False)):
            fully_shard(layer)
    fully_shard(model)
    return model


def rank_main(rank: int, world: int) -> Dict[str, Any]:
    """Every scenario on this rank; a dict of what the tests compare, and under ``errors`` the
    traceback of each scenario that raised (the others still run; its test reports it)."""
    out: Dict[str, Any] = {"errors": {}}
    for scenario in (_plain_and_recipe, _learned_weight, _learned_act_tensor, _learned_act_group, _running,
                     _compiled_ddp, _dcp_round_trip, _eval_cache_under_fsdp):
        try:
            out.update(scenario(rank))
        except Exception:  # noqa: BLE001  (both ranks raise alike: no collective is left waiting)
            out["errors"][scenario.__name__] = traceback.format_exc()
    return out


def _mine(rank: int, step: int) -> torch.Tensor:
    return batch(step)[rank:rank + 1]


def _plain_and_recipe(rank: int) -> Dict[str, Any]:
    """DDP and FSDP2, plain quantizers and a recipe: the first step's gradients, the params after 2 steps."""
    out: Dict[str, Any] = {}
    for kind in ("plain", "recipe"):
        for wrap, name in ((_ddp, "ddp"), (_fsdp, "fsdp")):
            model = wrap(mlp(kind))
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            for step in range(2):
                opt.zero_grad()
                loss_of(model, _mine(rank, step)).backward()
                if step == 0:
                    out[f"{name}_{kind}_grads"] = {n.replace("module.", ""): g for n, g in grads(model).items()}
                opt.step()
            out[f"{name}_{kind}_params"] = {n.replace("module.", ""): p for n, p in params(model).items()}
    return out


def _learned_weight(rank: int) -> Dict[str, Any]:
    """Learned weight scales under FSDP2, sharded before any forward."""
    model = _fsdp(mlp("learned_weight"))
    start = params(model)
    losses = train_steps(model, [_mine(rank, s % 2) for s in range(6)])
    return {"fsdp_learned_start": start, "fsdp_learned_losses": losses, "fsdp_learned_end": params(model)}


def _learned_act_tensor(rank: int) -> Dict[str, Any]:
    """A learned per-tensor activation scale under FSDP2: initialised from the global statistic."""
    model = _fsdp(mlp("learned_act_tensor"))
    train_steps(model, [_mine(rank, 0)])
    return {"fsdp_learned_act_tensor": params(model)}


def _learned_act_group(rank: int) -> Dict[str, Any]:
    """A learned per-group activation scale under DDP (one forward before wrapping creates it)."""
    model = mlp("learned_act_group")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(_mine(rank, 0))
    model = _ddp(model)
    train_steps(model, [_mine(rank, 0), _mine(rank, 1)])
    return {"group_warnings": [str(w.message) for w in caught],
            "ddp_learned_act_group": {n.replace("module.", ""): p for n, p in params(model).items()}}


def _running(rank: int) -> Dict[str, Any]:
    """Running statistics: DDP, FSDP2, the opt-out."""
    out: Dict[str, Any] = {}
    for wrap, name in ((_ddp, "ddp"), (_fsdp, "fsdp")):
        model = wrap(mlp("running"))
        train_steps(model, [_mine(rank, 0), _mine(rank, 1)])
        out[f"{name}_running"] = {n.replace("module.", ""): b for n, b in buffers(model).items()}
    model = mlp("running")
    with stat_sync(False):
        train_steps(_ddp(model), [_mine(rank, 0)])
    out["unsynced_running"] = buffers(model)
    return out


def _compiled_ddp(rank: int) -> Dict[str, Any]:
    """The recipe block compiled around DDP: output and (averaged) gradients."""
    model = _ddp(block())
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(rank))
    out = compiled(x)
    out.square().mean().backward()
    return {"compiled_out": out.detach(), "compiled_grads": {n.replace("module.", ""): g
                                                              for n, g in grads(model).items()}}


def _dcp_round_trip(rank: int) -> Dict[str, Any]:
    """Train under FSDP2, save with DCP, load in place into a fresh model: eval outputs equal."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    model = _fsdp(mlp("running"))
    train_steps(model, [batch(0)[rank:rank + 1]])
    model.eval()
    probe = batch(5)[rank:rank + 1]
    with torch.no_grad():
        before = model(probe)
    path = os.path.join(tempfile.gettempdir(), f"gq_dcp_{os.environ['MASTER_PORT']}")
    dcp.save(get_model_state_dict(model), checkpoint_id=path)
    fresh = _fsdp(mlp("running")).eval()
    state = fresh.state_dict()  # loaded in place: the fresh model's own tensors are written
    dcp.load(state, checkpoint_id=path)
    with torch.no_grad():
        after = fresh(probe)
    return {"dcp_before": before, "dcp_after": after, "dcp_buffers": buffers(fresh)}


def _eval_cache_under_fsdp(rank: int) -> Dict[str, Any]:
    """Eval outputs under FSDP2 after ``set_model_state_dict`` and after an optimizer step in eval."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    model = _fsdp(mlp("plain"))
    probe = batch(6)[rank:rank + 1]
    loss_of(model, batch(0)[rank:rank + 1]).backward()  # gradients for the step taken in eval below
    model.eval()
    with torch.no_grad():
        first = model(probe)
    held = sum(m._cache is not None for m in model.modules() if isinstance(m, WeightQuantProxy))
    new = {n: p * 1.5 for n, p in mlp("plain").state_dict().items()}
    set_model_state_dict(model, new, options=StateDictOptions(full_state_dict=True))
    with torch.no_grad():
        loaded = model(probe)
    torch.optim.SGD(model.parameters(), lr=0.05).step()  # the gradients of the first weights
    with torch.no_grad():
        stepped = model(probe)
    return {"cache_first": first, "cache_loaded": loaded, "cache_stepped": stepped, "cache_held": held}


def eval_cache_reference(rank: int) -> Dict[str, torch.Tensor]:
    """The single-process outputs ``_eval_cache_under_fsdp`` must give on ``rank``."""
    model = mlp("plain")
    halves = []
    for r in range(2):
        model.zero_grad()
        loss_of(model, batch(0)[r:r + 1]).backward()
        halves.append(grads(model))
    model.eval()
    probe = batch(6)[rank:rank + 1]
    with torch.no_grad():
        first = model(probe)
        for n, p in model.named_parameters():
            p.mul_(1.5)
            p.grad = (halves[0][n] + halves[1][n]) / 2
        loaded = model(probe)
    torch.optim.SGD(model.parameters(), lr=0.05).step()
    with torch.no_grad():
        stepped = model(probe)
    return {"cache_first": first, "cache_loaded": loaded, "cache_stepped": stepped}
