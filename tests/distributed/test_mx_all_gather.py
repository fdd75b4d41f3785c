"""MX all-gather under FSDP2 (groupquant.nn.enable_mx_all_gather).

The reference everywhere is the float route: the whole float32 weight quantized by the layer's own
proxy (2 processes: the same model under FSDP2 with its float32 all-gather). Single-process checks
run the pre / post all-gather functions over a list of row shards; one spawned run of 2 gloo
processes checks outputs, sharded gradients and updated shards bit for bit.
"""
from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from groupquant.inject import ConfigError
from groupquant.nn import DISABLED, QuantLinear, RECIPES, enable_mx_all_gather, quantize_model
from groupquant.nn.distributed import mx_shard_weight
from groupquant.packing.shard_payload import (ShardCodec, decode_gathered, dequantize_gathered, encode_shard,
                                              shard_amax)
from groupquant.proxy.gathered_weight import GatheredWeight
from groupquant.quantizers import MXFloat4e2m1Weight

WORKER = os.path.join(os.path.dirname(__file__), "mx_all_gather_worker.py")
FORMATS = ("mxfp4", "mxfp8", "nvfp4", "mxint8", "mxfp6_e3m2", "mxfp4_fwd_mxfp8_bwd")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.int32)


def _layer(recipe: str, out_features: int = 64, in_features: int = 64) -> QuantLinear:
    return QuantLinear(in_features, out_features, **RECIPES[recipe].layer_kwargs())


# ---- the payload of a row shard (pure functions over a shard list) ---------------------------------

@settings(max_examples=12, deadline=None)
@given(recipe=st.sampled_from(FORMATS), world=st.sampled_from([1, 2, 4]), blocks=st.integers(1, 2),
       in_blocks=st.integers(1, 3), scale=st.sampled_from([1e-3, 1.0, 300.0]), seed=st.integers(0, 2**16))
def test_gathered_shards_are_the_whole_weight_quantized(recipe, world, blocks, in_blocks, scale, seed):
    """Shards encoded one by one, their bytes laid end to end, decode to the whole weight as the
    layer's forward and input-gradient weight proxies quantize it."""
    rows, cols = 32 * blocks * world, 32 * in_blocks
    layer = _layer(recipe, rows, cols)
    w = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * scale
    for proxy in (layer.weight_quant, layer.weight_quant_for_grad_input):
        codec = ShardCodec.of(proxy.spec, 2, "t")
        shards = list(w.chunk(world))
        amax = torch.stack([shard_amax(s) for s in shards]).amax()
        payloads = [encode_shard(s, codec, amax) for s in shards]
        assert {p.codes.dtype for p in payloads} == {torch.uint8}
        assert sum(p.codes.numel() + p.scales.numel() for p in payloads) == codec.payload_nbytes((rows, cols))
        q = decode_gathered(torch.cat([p.codes for p in payloads]), torch.cat([p.scales for p in payloads]),
                            payloads[0].tensor_scale, codec, (rows, cols), torch.float32)
        expected = _bits(proxy.quant_value(w))
        assert torch.equal(_bits(q.dequantize()), expected)
        values = dequantize_gathered(torch.cat([p.codes for p in payloads]), torch.cat([p.scales for p in payloads]),
                                     payloads[0].tensor_scale, codec, (rows, cols), torch.float32)
        assert torch.equal(_bits(values), expected)


def test_nvfp4_tensor_scale_comes_from_the_whole_weight():
    """A shard holding only small values still gets the whole weight's tensor scale (NVFP4), NaN included."""
    layer = _layer("nvfp4")
    w = torch.randn(64, 64)
    w[40, 3] = 1e4  # in the second shard only
    codec = ShardCodec.of(layer.weight_quant.spec, 2, "t")
    amax = torch.stack([shard_amax(s) for s in w.chunk(2)]).amax()
    first = encode_shard(w[:32], codec, amax)
    assert torch.equal(first.tensor_scale, torch.tensor(1e4) / (448 * 6))
    with pytest.raises(ValueError, match="global_amax"):
        encode_shard(w[:32], codec, None)
    w[50, 0] = float("nan")
    nan_amax = torch.stack([shard_amax(s) for s in w.chunk(2)]).amax()
    assert torch.isnan(encode_shard(w[:32], codec, nan_amax).tensor_scale)


def test_shard_rows_must_hold_whole_backward_blocks():
    """Blocks along dim 0 (the input-gradient weight) may not straddle shards: a clear error."""
    codec = ShardCodec.of(_layer("mxfp8").weight_quant_for_grad_input.spec, 2, "layer.0")
    with pytest.raises(ConfigError, match="shard of 16 rows splits blocks of 32") as err:
        encode_shard(torch.randn(16, 64), codec, None, "layer.0")
    assert err.value.setting == "group_size"


# ---- the FSDP2 extension points, called by hand over a shard list -------------------------------------

class _Mesh:
    """What fsdp_pre_all_gather reads of a device mesh."""

    def __init__(self, world: int) -> None:
        self.world = world

    def size(self) -> int:
        return self.world

    def get_group(self):
        return None


def _gather_by_hand(weight, world: int, monkeypatch):
    """fsdp_pre_all_gather on each row shard, outputs laid end to end, fsdp_post_all_gather."""
    full = weight._data
    shards = [type(weight)(s.clone(), weight._plan) for s in full.chunk(world)]
    monkeypatch.setattr(mx_shard_weight, "_global_amax", lambda shard, group: shard_amax(full))
    results = [s.fsdp_pre_all_gather(_Mesh(world), full.shape, full.stride(), None, None) for s in shards]
    outputs = [torch.cat([r[0][i] for r in results]) for i in range(len(results[0][0]))]
    gathered, inner = shards[0].fsdp_post_all_gather(outputs, results[0][1], torch.float32)
    assert inner == ()
    return gathered, outputs, results[0][1], shards[0]


@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4", "mxfp8_weight_only"])
def test_pre_and_post_all_gather_give_the_float_route(recipe, monkeypatch):
    """The gathered weight in the layer gives its float-route output and gradients bit for bit; a
    refill (``out=``, every gather after the first) reaches aliases saved earlier."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(64, 64))
    quantize_model(ref, recipe=recipe)
    mx = copy.deepcopy(ref)
    enable_mx_all_gather(mx)
    gathered, outputs, meta, shard = _gather_by_hand(mx[0].weight, 2, monkeypatch)
    assert isinstance(gathered, GatheredWeight) and gathered.shape == ref[0].weight.shape
    assert all(o.dtype == torch.uint8 for o in outputs)
    param = nn.Parameter(gathered)
    mx[0]._parameters["weight"] = param  # what FSDP2 sets for the forward
    x = torch.randn(5, 64) * 3
    y_ref, y_mx = ref(x), mx(x)
    assert torch.equal(_bits(y_ref), _bits(y_mx))
    y_ref.square().sum().backward()
    y_mx.square().sum().backward()
    assert type(param.grad) is torch.Tensor
    assert torch.equal(_bits(ref[0].weight.grad), _bits(param.grad))
    alias = param.detach()
    shard.fsdp_post_all_gather([torch.zeros_like(o) for o in outputs], meta, torch.float32, out=param)
    assert torch.equal(alias.dequantize(mx[0].weight_quant.spec), torch.zeros(64, 64))


def test_gathered_weight_refuses_float_operations():
    layer = _layer("mxfp4")
    enable_mx_all_gather(nn.Sequential(layer))
    codec = layer.weight._plan.codecs[0]
    p = encode_shard(torch.randn(64, 64), codec)
    w = GatheredWeight.of((64, 64), torch.float32, {layer.weight_quant.spec: mx_shard_weight.GatheredCodes(
        p.codes, p.scales, None, codec)})
    with pytest.raises(RuntimeError, match="holds codes, not float values"):
        w + 1
    with pytest.raises(RuntimeError, match="did not gather this weight"):
        w.dequantize(layer.weight_quant_for_grad_input.spec, "layer")


# ---- enable_mx_all_gather: what it takes and what it refuses ---------------------------------------------

def test_enable_keeps_float_values_and_state_dict():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8))
    quantize_model(model, recipe="mxfp4", exclude=["1"])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert enable_mx_all_gather(model) == ["0"]
    assert type(model[1].weight) is nn.Parameter  # a float weight keeps the float all-gather
    state = model.state_dict()
    assert all(type(v) is torch.Tensor for v in state.values())
    assert all(torch.equal(before[k], state[k]) for k in before)
    model.load_state_dict({k: v + 1 for k, v in before.items()})
    assert torch.equal(model.state_dict()["0.weight"], before["0.weight"] + 1)


def test_enable_refuses_what_the_codes_cannot_stand_for():
    with pytest.raises(ValueError, match="no quant layer"):
        enable_mx_all_gather(nn.Sequential(nn.Linear(4, 4)))
    rows = QuantLinear(64, 64, weight_quant=MXFloat4e2m1Weight, weight_group_dim=0)
    with pytest.raises(ConfigError, match="dim FSDP2 splits") as err:
        enable_mx_all_gather(nn.Sequential(rows))
    assert err.value.setting == "weight_group_dim"
    float_bwd = QuantLinear(64, 64, **RECIPES["mxfp4"].replace(weight_quant_for_grad_input=DISABLED).layer_kwargs())
    with pytest.raises(ConfigError, match="takes the float weight") as err:
        enable_mx_all_gather(nn.Sequential(float_bwd))
    assert err.value.setting == "weight_quant_for_grad_input"
    tied = nn.Sequential(nn.Embedding(64, 64), nn.Linear(64, 64))
    quantize_model(tied, recipe="mxfp4")
    tied[1].weight = tied[0].weight
    with pytest.raises(ValueError, match=r"the weight is tied \(0.weight, 1.weight\)"):
        enable_mx_all_gather(tied)
    clipped = QuantLinear(64, 64, weight_quant=MXFloat4e2m1Weight, weight_ste="clipped")
    with pytest.raises(ConfigError, match="ste='clipped'"):
        enable_mx_all_gather(nn.Sequential(clipped))


# ---- 2 processes, gloo --------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _can_spawn() -> str:
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        return "torch.distributed with gloo is not available"
    try:
        _free_port()
    except OSError as err:
        return f"no local TCP port: {err}"
    return ""


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Both ranks' results of mx_all_gather_worker.py (one run for every check below)."""
    reason = _can_spawn()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("mx_all_gather")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, WORKER, str(rank), "2", str(port), str(out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(2)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=240)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rank, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"
    return [json.loads((out / f"{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.parametrize("recipe", ["mxfp4", "mxfp8", "nvfp4", "mxfp4_weight_only", "nvfp4@bfloat16"])
def test_fsdp2_results_equal_the_float32_all_gather(two_ranks, recipe):
    """Outputs, sharded gradients, updated shards (two SGD steps) and eval outputs equal the float32
    all-gather's bit for bit on both ranks (``@bfloat16``: both under FSDP2 mixed precision); the
    state dict holds float32 DTensors, and a DCP save / in-place load round trip restores the
    master weights."""
    for rank in two_ranks:
        r = rank[recipe]
        assert r["enabled"] == ["0", "2", "4"]
        assert r["outputs"] == [True, True] and r["grads"] == [True, True] and r["weights"] == [True, True]
        assert r["eval_outputs"] and r["state_equal"] and r["dcp_round_trip"]
        assert r["state_types"] == ["DTensor/Tensor/torch.float32"]


def _expected_bytes(recipe: str) -> int:
    """Bytes one rank sends per step for the worker's model (3 weights [64, 64], biases on the
    last two; layers 0 and 2 gathered again for backward, the root's layer 4 not), from the
    formats' widths and blocks."""
    layer = _layer(recipe)
    quantizations = {layer.weight_quant.spec}
    if layer.quantize_backprop:
        quantizations.add(layer.weight_quant_for_grad_input.spec)
    per_weight = 0
    for spec in quantizations:  # a [32, 64] shard: codes at the element width, one scale byte per block
        per_weight += 32 * 64 * spec.fmt.bit_width // 8 + 32 * 64 // spec.group_size
    bias = 32 * 4
    return (3 * per_weight + 2 * bias) + (2 * per_weight + bias)


@pytest.mark.parametrize("recipe", ["mxfp4", "mxfp8", "nvfp4", "mxfp4_weight_only"])
def test_fsdp2_all_gather_moves_codes(two_ranks, recipe):
    float_bytes = (3 * 32 * 64 * 4 + 2 * 32 * 4) + (2 * 32 * 64 * 4 + 32 * 4)
    for rank in two_ranks:
        assert rank[recipe]["bytes_ref"] == [float_bytes] * 2
        assert rank[recipe]["bytes_mx"] == [_expected_bytes(recipe)] * 2


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4_weight_only"])
def test_an_enabled_model_without_fsdp_computes_as_before(recipe):
    """Before fully_shard (or without it) the wrapped float32 weight trains and evaluates as the
    plain one: outputs, gradients, the eval path (no byte-compare cache over a subclass) and
    in-place changes seen in eval."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 32))
    quantize_model(ref, recipe=recipe)
    mx = copy.deepcopy(ref)
    enable_mx_all_gather(mx)
    x = torch.randn(4, 64)
    y_ref, y_mx = ref(x), mx(x)
    y_ref.square().sum().backward()
    y_mx.square().sum().backward()
    assert torch.equal(_bits(y_ref), _bits(y_mx))
    assert all(torch.equal(_bits(a.grad), _bits(b.grad)) for a, b in zip(ref.parameters(), mx.parameters()))
    ref.eval()
    mx.eval()
    with torch.no_grad():
        assert torch.equal(_bits(ref(x)), _bits(mx(x)))
        for model in (ref, mx):
            model[0].weight.mul_(3)
        assert torch.equal(_bits(ref(x)), _bits(mx(x)))
    assert torch.equal(ref[0].group_quantized_weight().codes, mx[0].group_quantized_weight().codes)
