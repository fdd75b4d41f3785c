"""Packed state dicts: every group-quantized weight in its storage bits, the rest as is.

``packed_state_dict(model)`` is a plain dict (tensors, strings, ints, lists) that ``torch.save``
writes and ``torch.load(..., weights_only=True)`` reads back::

    {"format": "groupquant.packed_state_dict", "version": 1,
     "packed": {"fc.weight": <PackedTensor record>, ...},   # see groupquant.packing
     "tensors": {"fc.bias": tensor, ...},                    # every other state_dict entry
     "quantizer_keys": ["fc.input_quant....", ...],         # entries of quantizer proxies
     "aliases": {"head.weight": "embed.weight", ...}}        # entries stored once under another key

Each tensor is stored once: an entry that is the same memory as an earlier one (a module
registered under two names, a weight tied to another module) is an alias of the first key. A
weight tied to a module that is not a quant layer (an ``nn.Embedding`` sharing the output head's
weight) stays float: the embedding needs the float values and only the head's quantizer sees them
quantized; a layer registered twice is packed once (its second name is an alias).

A quantized layer is a quant layer (``QuantLinear`` / ``QuantConv*`` / ``PackedLinear``) whose
``group_quantized_weight()`` answers (MX, NVFP4 or per-group weight quantizers; per-tensor /
per-channel weights stay float). Its
``weight`` entry is replaced by the packed codes and scales (an MXFP4 weight takes 4.25 bits
per element: 4.25/32 of float32). Every scale format packs exactly, with the weight's scale format in
its record: an NVFP4 weight (``NVFP4Weight``) is two FP4 codes per byte, one UE4M3 byte
(``float8_e4m3fn``) per 16 elements and its float32 tensor scale, 4.5 bits per element.

``load_packed_state_dict(model, sd)`` loads into either the same quantized architecture or
its float twin (``nn.Linear`` in place of ``QuantLinear``): weights are set to their dequantized
values (equal to the quantized model's fake-quant weights), and quantizer entries that the
model does not have are skipped. Into a packed model (``groupquant.pack_model``) each packed
weight goes straight into its :class:`~..inference.packed_linear.PackedLinear`, codes and scale bytes as they
are (never decoded); a weight of another format, shape or block size raises
:class:`~..errors.PackError` naming the layer, and so does a packed weight whose format
differs from a quant layer's weight quantizer (an NVFP4 weight into an MXFP4 ``QuantLinear``). ``packed_state_dict`` of a packed model gives
the same dict as of the QuantLinear model it came from.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import nn

from ...nn.layers.group_quantized_weight import WeightNotGroupQuantized
from ...nn.layers.quant_layers import is_quant_layer, iter_quant_layers
from ...ops import GroupLayout
from ...packing import PackedTensor, pack
from ...proxy import QuantProxy
from ..errors import PackError
from ..inference.packed_linear import PackedLinear

#: A PackedLinear's state-dict entries that its packed weight record carries (codes, scale bytes, tensor scale).
_PACKED_ENTRIES = ("weight_codes", "weight_scale", "weight_tensor_scale")

__all__ = ["packed_state_dict", "unpacked_state_dict", "load_packed_state_dict", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "groupquant.packed_state_dict"
FORMAT_VERSION = 1


def _memory_key(t: torch.Tensor) -> Optional[tuple]:
    """What two state entries that are the same tensor memory share (None for empty tensors)."""
    if t.numel() == 0:
        return None
    return (t.device, t.dtype, t.data_ptr(), tuple(t.shape), tuple(t.stride()))


def _first_keys(state: Dict[str, torch.Tensor]) -> Dict[str, str]:
    """``key -> the first key holding the same tensor memory`` (itself for most keys)."""
    first: Dict[tuple, str] = {}
    out = {}
    for key, t in state.items():
        mk = _memory_key(t)
        out[key] = key if mk is None else first.setdefault(mk, key)
    return out


def _module_names(model: nn.Module) -> Dict[nn.Module, List[str]]:
    """Every module with all the names it is registered under (first-seen order)."""
    names: Dict[nn.Module, List[str]] = {}
    for name, m in model.named_modules(remove_duplicate=False):
        names.setdefault(m, []).append(name)
    return names


def _prefix(name: str) -> str:
    return f"{name}." if name else ""


def _group_quantized_record(module: nn.Module, name: str) -> Optional[Dict[str, object]]:
    """The packed record of a quant layer's group-quantized weight, or None (float / not group-wise)."""
    if not is_quant_layer(module):
        return None
    try:
        q = module.group_quantized_weight(name)
    except WeightNotGroupQuantized:
        return None
    return pack(q).to_record()


def packed_state_dict(model: nn.Module) -> Dict[str, object]:
    """The model's state with each group-quantized weight packed (see the module docstring)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    state = model.state_dict()
    first = _first_keys(state)
    holding: Dict[str, List[str]] = {}  # first key -> every key of that memory
    for key, f in first.items():
        holding.setdefault(f, []).append(key)
    packed: Dict[str, object] = {}
    aliases: Dict[str, str] = {}
    own_bits: set = set()  # a PackedLinear's code and scale entries (written as its packed weight)
    quantizer_keys: List[str] = []
    for module, names in _module_names(model).items():
        prefixes = [_prefix(n) for n in names]
        if isinstance(module, QuantProxy):
            quantizer_keys += [k for k in state if any(k.startswith(p) for p in prefixes)]
            continue
        keys = [f"{p}weight" for p in prefixes]
        if isinstance(module, PackedLinear):
            own_bits.update(f"{p}{b}" for p in prefixes for b in _PACKED_ENTRIES)
        elif keys[0] not in state or any(k not in keys for k in holding[first[keys[0]]]):
            continue  # no weight entry, or a weight tied to another module: stored float, once
        record = _group_quantized_record(module, names[0])
        if record is not None:
            packed[keys[0]] = record
            aliases.update({k: keys[0] for k in keys[1:]})
    tensors: Dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key in packed or key in own_bits or key in aliases:
            continue
        if first[key] != key:
            aliases[key] = first[key]
        else:
            tensors[key] = value.detach().clone()
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "packed": packed, "tensors": tensors,
            "quantizer_keys": sorted(set(quantizer_keys)), "aliases": aliases}


def _check(sd: object) -> Dict[str, object]:
    """``sd`` with every alias filled in (the same record / tensor under each of its keys);
    ValueError when it is not a packed state dict of this version."""
    if not isinstance(sd, dict) or sd.get("format") != FORMAT_NAME:
        raise ValueError(f"not a packed state dict (expected a dict with format={FORMAT_NAME!r})")
    if sd.get("version") != FORMAT_VERSION:
        raise ValueError(f"packed state dict version {sd.get('version')!r} is not supported (this groupquant "
                         f"reads version {FORMAT_VERSION})")
    packed, tensors = dict(sd["packed"]), dict(sd["tensors"])  # type: ignore[call-overload]
    for alias, key in sd.get("aliases", {}).items():  # type: ignore[union-attr]
        if key in packed:
            packed[alias] = packed[key]
        elif key in tensors:
            tensors[alias] = tensors[key]
        else:
            raise ValueError(f"packed state dict alias {alias!r} names {key!r}, which it does not hold")
    return dict(sd, packed=packed, tensors=tensors, aliases={})


def unpacked_state_dict(sd: Dict[str, object]) -> Dict[str, torch.Tensor]:
    """A plain state dict: packed weights dequantized (in their original dtype), other entries as
    stored (an alias is the same tensor as the entry it names)."""
    sd = _check(sd)
    state: Dict[str, torch.Tensor] = dict(sd["tensors"])  # type: ignore[arg-type]
    done: Dict[int, torch.Tensor] = {}
    for key, record in sd["packed"].items():  # type: ignore[union-attr]
        if id(record) not in done:
            done[id(record)] = PackedTensor.from_record(record).dequantize()
        state[key] = done[id(record)]
    return state


def _check_quant_layers(model: nn.Module, sd: Dict[str, object]) -> None:
    """PackError naming the layer when a packed weight's format, block or scale format differs from
    the weight quantizer of the quant layer it loads into (a float layer takes any)."""
    for name, m in iter_quant_layers(model):
        record = sd["packed"].get(f"{_prefix(name)}weight")  # type: ignore[union-attr]
        if record is None or isinstance(m, PackedLinear) or not m.weight_quant.is_quant_enabled:
            continue
        p, spec = PackedTensor.from_record(record), m.weight_spec
        where, quantizer = name or type(m).__name__, m.weight_quant.quantizer.__name__
        if not spec.is_group:
            raise PackError(f"{where}: a packed {p.fmt.name} weight in blocks of {p.block_size} does not fit this layer "
                            f"(weight_quant={quantizer} scales per {spec.granularity})")
        g = spec.scale_granularity
        want = GroupLayout.build(m.weight.shape, g.group_dim_of(m.weight.dim()), g.group_size)
        if (p.fmt, p.scale_format, p.tensor_scale is not None, p.layout) != \
                (spec.fmt, spec.scale_format, spec.tensor_scale, want):
            raise PackError(f"{where}: packed weight of format {p.fmt.name}, scale_format {p.scale_format.name} "
                            f"(tensor scale: {p.tensor_scale is not None}), block_size {p.block_size}, shape "
                            f"{tuple(p.shape)} does not fit this layer (weight_quant={quantizer}: format "
                            f"{spec.fmt.name}, scale_format {spec.scale_format.name} (tensor scale: "
                            f"{spec.tensor_scale}), block_size {want.block_size}, shape {tuple(m.weight.shape)})")


def load_packed_state_dict(model: nn.Module, sd: Dict[str, object], strict: bool = True):
    """Load a packed state dict into ``model`` (quantized, packed, or its float twin); returns torch's
    ``(missing_keys, unexpected_keys)``. Quantizer entries the model lacks are skipped; with
    ``strict`` any other mismatch raises as ``nn.Module.load_state_dict`` does. A packed weight of
    another format than a quant layer's weight quantizer raises :class:`PackError` naming the layer."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    sd = _check(sd)
    _check_quant_layers(model, sd)
    direct = _load_into_packed_layers(model, sd)
    rest = dict(sd, packed={k: v for k, v in sd["packed"].items() if k not in direct})  # type: ignore[union-attr]
    state = unpacked_state_dict(rest)
    own = model.state_dict()
    skip = set(sd["quantizer_keys"]) - set(own)  # type: ignore[arg-type]
    state = {k: v for k, v in state.items() if k not in skip}
    if not direct:
        return model.load_state_dict(state, strict=strict)
    result = model.load_state_dict(state, strict=False)
    loaded_bits = {f"{key[:-len('weight')]}{b}" for key in direct for b in _PACKED_ENTRIES}
    missing = [k for k in result.missing_keys if k not in loaded_bits]
    if strict and (missing or result.unexpected_keys):
        raise RuntimeError(f"Error(s) in loading the packed state dict into {type(model).__name__}: missing keys "
                           f"{missing}, unexpected keys {result.unexpected_keys}")
    return type(result)(missing, result.unexpected_keys)


def _load_into_packed_layers(model: nn.Module, sd: Dict[str, object]) -> set:
    """Load each packed weight whose layer is a PackedLinear directly (bits as stored); returns their keys."""
    layers = {name: m for name, m in model.named_modules(remove_duplicate=False) if isinstance(m, PackedLinear)}
    done = set()
    loaded: Dict[int, object] = {}  # layer -> the record it took (a shared layer loads once)
    for key, record in sd["packed"].items():  # type: ignore[union-attr]
        name = key[:-len(".weight")] if key.endswith(".weight") else ("" if key == "weight" else None)
        if name is not None and name in layers:
            layer = layers[name]
            if loaded.get(id(layer)) is not record:
                layer.load_packed(PackedTensor.from_record(record))
                loaded[id(layer)] = record
            done.add(key)
    return done
