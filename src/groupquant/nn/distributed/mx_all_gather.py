"""MX all-gather under FSDP2: ``enable_mx_all_gather(model)`` makes FSDP2 gather each quantized
weight as element codes and scale codes instead of float32.

Call it after ``quantize_model`` (or on quant layers) and before ``fully_shard`` and before the
optimizer is built (it replaces each enabled layer's ``weight`` parameter by one whose data is
the same float32 tensor wrapped in :class:`groupquant.nn.distributed.mx_shard_weight.MXShardWeight`). The
optimizer, ``state_dict`` and DCP see float32 master shards; what FSDP2's all-gather moves is,
for each enabled layer:

- the forward weight's codes (blocks along the input dim 1, which FSDP2 does not split), and
- with a quantized backward (the recipes ``mxfp8``, ``mxfp4``, ``nvfp4``, ...), also the codes
  of the input-gradient GEMM's weight, ``Q(W | out)``: blocks along dim 0 that each rank forms
  from its own rows (exact when every shard's row count is a multiple of the block: checked at
  the gather, a clear error otherwise). Those codes replace the float weight the backward would
  otherwise need; every gather moves both sets, so the bytes do not depend on when FSDP2
  gathers (``reshard_after_forward`` True or False).

The layer's forward then reads the gathered codes (:mod:`groupquant.proxy.gathered_weight`)
instead of quantizing a float weight: outputs and gradients equal, bit for bit, those of
gathering float32 and quantizing after (tests/distributed/test_mx_all_gather.py).

Enabled: ``QuantLinear`` layers whose weight quantizer is a dynamic group-wise one read straight off the
quantize op (MX formats, NVFP4: abs-max scales, coded scales, deterministic rounding, identity
STE). Left as they are (float all-gather): layers with a float weight, and quant convolutions (their
backward reads the weight tensor itself). Refused with an error
naming the setting: blocks along dim 0 in the forward, learned / running / searched weight
scales, stochastic rounding, the clipped STE, float32 scales, and a quantized backward that keeps
the weight in float (``weight_quant_for_grad_input=DISABLED``: that GEMM needs the float weight).
"""
from __future__ import annotations

from typing import Any, Dict, List

from torch import nn

from ...inject import ConfigError
from ...packing.shard_payload import ShardCodec
from ...proxy import QuantProxy
from ..layers.group_quantized_weight import codes_from_the_op
from .mx_shard_weight import GatherPlan, MXShardWeight
from ..layers.linear import QuantLinear
from ..layers.quant_layers import iter_quant_layers

__all__ = ["enable_mx_all_gather", "mx_all_gather_plan"]


def _check_proxy(proxy: QuantProxy, slot: str, where: str) -> None:
    """A quantization the gathered codes can stand in for (see module doc); errors name ``slot``."""
    spec = proxy.spec
    if not codes_from_the_op(proxy):
        raise ConfigError(slot, f"{where}: {slot}={proxy.quantizer.__name__} is not a dynamic group-wise quantizer "
                                "read off the quantize op (abs-max scales per group, deterministic rounding, no "
                                "element precision); the MX all-gather cannot stand in for it")
    if spec.ste != "identity":
        raise ConfigError(slot, f"{where}: {slot} uses ste={spec.ste!r}; the gathered codes give the identity "
                                "(straight-through) gradient only")


def mx_all_gather_plan(layer: nn.Module, where: str) -> GatherPlan:
    """What ``layer``'s all-gather moves (forward weight codes, then the input-gradient weight's),
    or a ConfigError naming the setting that rules it out."""
    proxy = layer.weight_quant
    _check_proxy(proxy, "weight_quant", where)
    ndim = layer.weight.dim()
    forward = ShardCodec.of(proxy.spec, ndim, where)
    if forward.settings.dim == 0:
        raise ConfigError("weight_group_dim", f"{where}: the forward weight's blocks run along dim 0, the dim FSDP2 "
                                              "splits; the MX all-gather needs them along another dim (the MX "
                                              "default, the input features)")
    specs, codecs = [proxy.spec], [forward]
    if getattr(layer, "quantize_backprop", False):
        backward = getattr(layer, "weight_quant_for_grad_input", None)
        if backward is None:
            raise ConfigError("weight_quant_for_grad_input",
                              f"{where}: weight_quant_for_grad_input is DISABLED (the input-gradient GEMM takes the "
                              "float weight); the MX all-gather does not move float weights: quantize that operand "
                              "or leave this model's all-gather in float32")
        _check_proxy(backward, "weight_quant_for_grad_input", where)
        if backward.spec != proxy.spec:
            specs.append(backward.spec)
            codecs.append(ShardCodec.of(backward.spec, ndim, where))
    return GatherPlan(where, tuple(specs), tuple(codecs))


def _float_state(module: nn.Module, state_dict: Dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """``state_dict`` hook: the weight as its float32 master data (a DTensor over it once sharded),
    sharing storage, so in-place loads (DCP) write the master weight."""
    key = prefix + "weight"
    value = state_dict.get(key)
    local = getattr(value, "_local_tensor", None)
    if isinstance(local, MXShardWeight):
        from torch.distributed.tensor import DTensor  # (imported only once a weight is sharded)
        state_dict[key] = DTensor.from_local(local._data, value.device_mesh, value.placements, run_check=False,
                                             shape=value.shape, stride=value.stride())
    elif isinstance(value, MXShardWeight):
        state_dict[key] = value._data


def enable_mx_all_gather(model: nn.Module) -> List[str]:
    """Make FSDP2 all-gather the weights of ``model``'s ``QuantLinear`` layers as MX / NVFP4 codes
    (module doc); returns the names of the layers enabled (those with a float weight are left alone).

    Call after ``quantize_model`` and before ``fully_shard`` and the optimizer. ValueError when no
    layer has a group-quantized weight or a weight is already sharded; a ConfigError naming the
    setting when a layer's quantizers rule the route out."""
    enabled = []
    holders: Dict[int, List[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        holders.setdefault(id(param), []).append(name)
    # (convolutions keep the float all-gather: their backward reads the weight as float)
    for name, layer in iter_quant_layers(model, kinds=QuantLinear):
        if layer.weight_spec is None:
            continue
        where = name or type(layer).__name__
        weight = layer._parameters.get("weight")
        if weight is None:
            raise ValueError(f"{where}: no weight parameter to enable the MX all-gather on (parametrized?)")
        if isinstance(weight, MXShardWeight):
            enabled.append(where)
            continue
        if type(weight.data).__name__ == "DTensor" or hasattr(weight, "_local_tensor"):
            raise ValueError(f"{where}: the weight is already sharded; call enable_mx_all_gather before fully_shard")
        if len(holders.get(id(weight), ())) > 1:
            raise ValueError(f"{where}: the weight is tied ({', '.join(holders[id(weight)])}); the MX all-gather "
                             "gives the other holders codes, not float: untie it or leave this model's all-gather in "
                             "float32")
        plan = mx_all_gather_plan(layer, where)
        layer.weight = nn.Parameter(MXShardWeight(weight.detach(), plan), requires_grad=weight.requires_grad)
        layer._register_state_dict_hook(_float_state)
        enabled.append(where)
    if not enabled:
        raise ValueError("enable_mx_all_gather: no quant layer of the model quantizes its weight group-wise "
                         "(quantize_model(model, recipe=...) with an MX or NVFP4 recipe first)")
    return enabled
