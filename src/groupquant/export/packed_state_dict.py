"""Packed state dicts: every group-quantized weight in its storage bits, the rest as is.

``packed_state_dict(model)`` is a plain dict (tensors, strings, ints, lists) that ``torch.save``
writes and ``torch.load(..., weights_only=True)`` reads back::

    {"format": "groupquant.packed_state_dict", "version": 1,
     "packed": {"fc.weight": <PackedTensor record>, ...},   # see groupquant.packing
     "tensors": {"fc.bias": tensor, ...},                    # every other state_dict entry
     "quantizer_keys": ["fc.input_quant....", ...]}          # entries of quantizer proxies

A quantized layer is a module with an enabled ``weight_quant`` proxy whose ``quant_weight()`` is
a group-wise quant tensor (``to_group_quantized()``): groupquant's ``QuantLinear`` / ``QuantConv*``
with MX or per-group weight quantizers. (Per-tensor / per-channel weights stay float.) Its
``weight`` entry is replaced by the packed codes and scales (an MXFP4 weight takes 4.25 bits
per element: 4.25/32 of float32). Every scale format packs exactly, with the weight's scale format in
its record: an NVFP4 weight (``NVFP4Weight``) is two FP4 codes per byte, one UE4M3 byte
(``float8_e4m3fn``) per 16 elements and its float32 tensor scale, 4.5 bits per element.

``load_packed_state_dict(model, sd)`` loads into either the same quantized architecture or
its float twin (``nn.Linear`` in place of ``QuantLinear``): weights are set to their dequantized
values (equal to the quantized model's fake-quant weights), and quantizer entries that the
model does not have are skipped. Into a packed model (``groupquant.pack_model``) each packed
weight goes straight into its :class:`~.packed_linear.PackedLinear`, codes and scale bytes as they
are (never decoded); a weight of another format, shape or block size raises
:class:`~.packed_linear.PackError` naming the layer. ``packed_state_dict`` of a packed model gives
the same dict as of the QuantLinear model it came from.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import nn

from ..packing import PackedTensor, pack
from ..proxy import QuantProxy
from .packed_linear import PackedLinear

#: A PackedLinear's buffers that its packed weight record carries (codes, scale bytes, tensor scale).
_PACKED_BUFFERS = ("weight_codes", "weight_scale", "weight_tensor_scale")

__all__ = ["packed_state_dict", "unpacked_state_dict", "load_packed_state_dict", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "groupquant.packed_state_dict"
FORMAT_VERSION = 1


def _packable_weight(module: nn.Module) -> Optional[PackedTensor]:
    """The packed weight of a quantized layer with a group-wise weight quantizer, else None."""
    proxy = getattr(module, "weight_quant", None)
    if not isinstance(proxy, QuantProxy) or not proxy.is_quant_enabled:
        return None
    with torch.no_grad():
        qt = module.quant_weight()
    if not callable(getattr(qt, "to_group_quantized", None)):
        return None
    return pack(qt)


def packed_state_dict(model: nn.Module) -> Dict[str, object]:
    """The model's state with each group-quantized weight packed (see the module docstring)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    state = model.state_dict()
    packed: Dict[str, object] = {}
    own_bits: set = set()  # a PackedLinear's code and scale buffers (written as its packed weight)
    quantizer_keys: List[str] = []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, QuantProxy):
            quantizer_keys += [k for k in state if k.startswith(prefix)]
            continue
        if isinstance(module, PackedLinear):
            packed[f"{prefix}weight"] = module.packed_weight().to_record()
            own_bits.update({f"{prefix}{b}" for b in _PACKED_BUFFERS})
            continue
        p = _packable_weight(module)
        if p is not None:
            packed[f"{prefix}weight"] = p.to_record()
    tensors = {k: v.detach().clone() for k, v in state.items() if k not in packed and k not in own_bits}
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "packed": packed, "tensors": tensors,
            "quantizer_keys": sorted(quantizer_keys)}


def _check(sd: object) -> Dict[str, object]:
    if not isinstance(sd, dict) or sd.get("format") != FORMAT_NAME:
        raise ValueError(f"not a packed state dict (expected a dict with format={FORMAT_NAME!r})")
    if sd.get("version") != FORMAT_VERSION:
        raise ValueError(f"packed state dict version {sd.get('version')!r} is not supported (this groupquant "
                         f"reads version {FORMAT_VERSION})")
    return sd


def unpacked_state_dict(sd: Dict[str, object]) -> Dict[str, torch.Tensor]:
    """A plain state dict: packed weights dequantized (in their original dtype), other entries as stored."""
    sd = _check(sd)
    state: Dict[str, torch.Tensor] = dict(sd["tensors"])  # type: ignore[arg-type]
    for key, record in sd["packed"].items():  # type: ignore[union-attr]
        state[key] = PackedTensor.from_record(record).dequantize()
    return state


def load_packed_state_dict(model: nn.Module, sd: Dict[str, object], strict: bool = True):
    """Load a packed state dict into ``model`` (quantized, or its float twin); returns torch's
    ``(missing_keys, unexpected_keys)``. Quantizer entries the model lacks are skipped; with
    ``strict`` any other mismatch raises as ``nn.Module.load_state_dict`` does."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    sd = _check(sd)
    direct = _load_into_packed_layers(model, sd)
    rest = dict(sd, packed={k: v for k, v in sd["packed"].items() if k not in direct})  # type: ignore[union-attr]
    state = unpacked_state_dict(rest)
    own = model.state_dict()
    skip = set(sd["quantizer_keys"]) - set(own)  # type: ignore[arg-type]
    state = {k: v for k, v in state.items() if k not in skip}
    if not direct:
        return model.load_state_dict(state, strict=strict)
    result = model.load_state_dict(state, strict=False)
    loaded_bits = {f"{key[:-len('weight')]}{b}" for key in direct for b in _PACKED_BUFFERS}
    missing = [k for k in result.missing_keys if k not in loaded_bits]
    if strict and (missing or result.unexpected_keys):
        raise RuntimeError(f"Error(s) in loading the packed state dict into {type(model).__name__}: missing keys "
                           f"{missing}, unexpected keys {result.unexpected_keys}")
    return type(result)(missing, result.unexpected_keys)


def _load_into_packed_layers(model: nn.Module, sd: Dict[str, object]) -> set:
    """Load each packed weight whose layer is a PackedLinear directly (bits as stored); returns their keys."""
    layers = {name: m for name, m in model.named_modules() if isinstance(m, PackedLinear)}
    done = set()
    for key, record in sd["packed"].items():  # type: ignore[union-attr]
        name = key[:-len(".weight")] if key.endswith(".weight") else ("" if key == "weight" else None)
        if name is not None and name in layers:
            layers[name].load_packed(PackedTensor.from_record(record))
            done.add(key)
    return done
