"""One rank of the 2-process MX all-gather check (run by test_mx_all_gather.py, not collected).

``python mx_all_gather_worker.py RANK WORLD PORT OUT_DIR``: for each recipe, the same model
twice under FSDP2 (gloo, CPU): float32 all-gather (the reference) and ``enable_mx_all_gather``;
two steps of forward, backward and SGD on this rank's own batch. Writes ``OUT_DIR/RANK.json``
with, per recipe, whether outputs, sharded gradients and updated shards match bit for bit, the
bytes each all-gather moved, and the state dict's types.
"""
from __future__ import annotations

import copy
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from groupquant.nn import enable_mx_all_gather, quantize_model

#: Recipes (``@bfloat16``: under FSDP2 mixed precision, parameters gathered in bfloat16).
RECIPES = ("mxfp4", "mxfp8", "nvfp4", "mxfp4_weight_only", "nvfp4@bfloat16")
WIDTH = 64


#: The collective FSDP2's default all-gather calls (``all_gather_single`` in torch 2.13).
_GATHER = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"


class _Counter:
    """Bytes each rank hands to FSDP2's all-gather collective while counting."""

    def __init__(self) -> None:
        self.bytes = 0
        self._orig = getattr(dist, _GATHER)

    def __enter__(self) -> "_Counter":
        def counted(output_tensor, input_tensor, *args, **kwargs):
            self.bytes += input_tensor.numel() * input_tensor.element_size()
            return self._orig(output_tensor, input_tensor, *args, **kwargs)
        setattr(dist, _GATHER, counted)
        return self

    def __exit__(self, *exc) -> None:
        setattr(dist, _GATHER, self._orig)


def _model(recipe: str) -> nn.Module:
    recipe = recipe.split("@")[0]
    torch.manual_seed(0)  # the same weights on every rank
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH, bias=False), nn.GELU(), nn.Linear(WIDTH, WIDTH), nn.GELU(),
                          nn.Linear(WIDTH, WIDTH))  # the last one stays with the root (no reshard after forward)
    quantize_model(model, recipe=recipe)
    return model


def _shard(model: nn.Module, recipe: str) -> nn.Module:
    dtype = recipe.partition("@")[2]
    policy = MixedPrecisionPolicy(param_dtype=getattr(torch, dtype)) if dtype else MixedPrecisionPolicy()
    fully_shard(model[0], mp_policy=policy)
    fully_shard(model[2], mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.to_local() if hasattr(t, "to_local") else t
    t = t._data if hasattr(t, "_data") else t
    return t.detach().clone().view(torch.int16 if t.element_size() == 2 else torch.int32)


def _same(a, b) -> bool:
    return all(torch.equal(_bits(x), _bits(y)) for x, y in zip(a, b))


def _dcp_round_trip(mx: nn.Module, recipe: str, out_dir: str) -> bool:
    """DCP saves the float32 master shards; an in-place ``dcp.load`` into another enabled model
    (other weights) reaches its master weights: the same parameters and outputs after."""
    import torch.distributed.checkpoint as dcp
    path = os.path.join(out_dir, f"dcp_{recipe}")
    dcp.save(mx.state_dict(), checkpoint_id=path)
    other = _model(recipe)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    enable_mx_all_gather(other)
    _shard(other, recipe)
    state = other.state_dict()
    dcp.load(state, checkpoint_id=path)
    same_weights = _same(list(mx.parameters()), list(other.parameters()))
    x = torch.randn(3, WIDTH, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        same_out = torch.equal(_bits(mx(x)), _bits(other(x)))
    mx.reshard()  # the root keeps its gathered weights after a forward without backward
    return same_weights and same_out


def _run(recipe: str, rank: int, out_dir: str) -> dict:
    ref = _model(recipe)
    mx = copy.deepcopy(ref)
    enabled = enable_mx_all_gather(mx)
    _shard(ref, recipe)
    _shard(mx, recipe)
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (ref, mx)]
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
    result = {"enabled": enabled, "outputs": [], "grads": [], "weights": [], "bytes_ref": [], "bytes_mx": []}
    for _step in range(2):
        x = torch.randn(6, WIDTH, generator=gen) * 4
        outs = []
        for model, opt, key in zip((ref, mx), opts, ("bytes_ref", "bytes_mx")):
            with _Counter() as counter:
                y = model(x)
                y.square().mean().backward()
            result[key].append(counter.bytes)
            outs.append(y.detach())
        result["outputs"].append(torch.equal(_bits(outs[0]), _bits(outs[1])))
        result["grads"].append(_same([p.grad for p in ref.parameters()], [p.grad for p in mx.parameters()]))
        for opt in opts:
            opt.step()
            opt.zero_grad()
        result["weights"].append(_same(list(ref.parameters()), list(mx.parameters())))
    state = mx.state_dict()
    result["state_types"] = sorted({f"{type(v).__name__}/{type(getattr(v, '_local_tensor', v)).__name__}/{v.dtype}"
                                    for v in state.values()})
    full = {k: v.full_tensor() for k, v in state.items()}
    ref_full = {k: v.full_tensor() for k, v in ref.state_dict().items()}
    result["state_equal"] = _same([full[k] for k in sorted(full)], [ref_full[k] for k in sorted(full)])
    result["dcp_round_trip"] = _dcp_round_trip(mx, recipe, out_dir)
    mx.eval()
    ref.eval()
    with torch.no_grad():
        x = torch.randn(3, WIDTH, generator=gen)
        result["eval_outputs"] = torch.equal(_bits(ref(x)), _bits(mx(x)))
    return result


def main() -> None:
    rank, world, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        results = {recipe: _run(recipe, rank, out_dir) for recipe in RECIPES}
        dist.barrier()  # both ranks done before either closes its gloo pairs (an abort at exit otherwise)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
