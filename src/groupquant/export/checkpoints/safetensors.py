"""groupquant's own packed checkpoint in one safetensors file (no pickle).

Tensors (``K`` is the state-dict key of a group-quantized weight, e.g. ``model.layers.0.mlp.up_proj.weight``):

- ``K.codes``: uint8, the packed element codes as :class:`groupquant.packing.PackedTensor` stores
  them (bit streams LSB first, 1-D; 8-bit formats one byte per code in the contracted shape
  ``[out, k, block]``), byte for byte;
- ``K.scales``: uint8 ``[out, k]``, one scale code per block (E8M0 ``e + 127``, UE4M3 bytes, ...);
- ``K.tensor_scale``: float32 0-d, the per-tensor second scale (NVFP4) where the weight has one;
- every other state entry (embeddings, norms, a float head, biases, quantizer state) as it is.

The safetensors ``metadata`` (strings only) holds a small JSON header:
``format`` = ``"groupquant"``, ``format_version`` (:data:`FORMAT_VERSION`), ``groupquant_version``,
``layers`` (JSON: per key, the element format record, the scale format record, ``shape``, ``dim``,
``block_size``, ``dtype`` and ``tensor_scale``: ``"float32"`` or ``"none"``), ``aliases`` (JSON:
entries stored once under another key: tied weights, layers registered twice),
``quantizer_keys`` (JSON) and, for a model with a Hugging Face config, ``config`` (JSON).
The file is written beside the path and renamed onto it (:mod:`.atomic_write`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import torch

from ...packing import PackedTensor
from ...packing.storage_dtypes import element_storage_dtype, scale_storage_dtype
from .atomic_write import written_beside
from .contents import CheckpointContents
from ..errors import CheckpointError
from .packed_state_dict import FORMAT_NAME, FORMAT_VERSION as STATE_VERSION

__all__ = ["write_safetensors", "read_safetensors", "FORMAT_TAG", "FORMAT_VERSION"]

#: ``metadata["format"]`` of a groupquant safetensors checkpoint.
FORMAT_TAG = "groupquant"
#: ``metadata["format_version"]`` this groupquant writes and reads.
FORMAT_VERSION = 1

_SUFFIXES = (".codes", ".scales", ".tensor_scale")


def _safetensors():
    """The safetensors torch API, or an ImportError naming the extra."""
    try:
        import safetensors.torch as st
    except ImportError as e:
        raise ImportError(f"groupquant.save/load with format='safetensors' needs the safetensors package ({e}); "
                          "install it with: pip install 'groupquant[llm]'") from e
    return st


def _layer_header(p: PackedTensor) -> Dict[str, Any]:
    """The JSON header entry of one packed weight (its format; the tensors hold the bits)."""
    return {"element_format": p.fmt.record(), "scale_format": p.scale_format.record(), "shape": list(p.shape),
            "dim": p.dim, "block_size": p.block_size, "dtype": str(p.dtype),
            "tensor_scale": "none" if p.tensor_scale is None else "float32"}


def write_safetensors(contents: CheckpointContents, path: Path) -> None:
    """Write ``contents`` to the safetensors file ``path`` (see the module docstring)."""
    from ... import __version__
    st = _safetensors()
    state = contents.state
    tensors: Dict[str, torch.Tensor] = {}
    layers: Dict[str, Any] = {}
    for key, record in state["packed"].items():
        p = PackedTensor.from_record(record)
        tensors[f"{key}.codes"] = p.data.contiguous().view(torch.uint8)
        tensors[f"{key}.scales"] = p.scale.contiguous().view(torch.uint8)
        if p.tensor_scale is not None:
            tensors[f"{key}.tensor_scale"] = p.tensor_scale.contiguous()
        layers[key] = _layer_header(p)
    for key, value in state["tensors"].items():
        if key in tensors or key.endswith(_SUFFIXES) and key.rsplit(".", 1)[0] in layers:
            raise CheckpointError(f"safetensors checkpoint: state entry {key!r} collides with a packed weight's tensor")
        tensors[key] = value.contiguous()
    metadata = {"format": FORMAT_TAG, "format_version": str(FORMAT_VERSION), "groupquant_version": __version__,
                "layers": json.dumps(layers), "aliases": json.dumps(state["aliases"]),
                "quantizer_keys": json.dumps(state["quantizer_keys"])}
    if contents.config is not None:
        metadata["config"] = json.dumps(contents.config, default=str)
    with written_beside(path) as tmp:  # the old file stays until the new one is whole
        st.save_file(tensors, str(tmp), metadata=metadata)


def _metadata(path: Path) -> Dict[str, str]:
    """The file's safetensors metadata; CheckpointError unless it is a groupquant checkpoint of this version."""
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    if metadata.get("format") != FORMAT_TAG:
        raise CheckpointError(f"{path}: not a groupquant safetensors checkpoint (metadata format="
                              f"{metadata.get('format')!r}, expected {FORMAT_TAG!r}); a compressed-tensors checkpoint "
                              "is a directory with config.json, read with groupquant.load(directory)")
    if metadata.get("format_version") != str(FORMAT_VERSION):
        raise CheckpointError(f"{path}: groupquant safetensors format_version {metadata.get('format_version')!r} is "
                              f"not supported (this groupquant reads version {FORMAT_VERSION})")
    return metadata


def _packed_record(key: str, header: Dict[str, Any], tensors: Dict[str, torch.Tensor]) -> Dict[str, Any]:
    """The PackedTensor record of packed weight ``key`` from its header entry and tensors."""
    from ...packing.format_record import format_from_record, scale_format_from_record
    fmt = format_from_record(header["element_format"])
    sf = scale_format_from_record(header["scale_format"])
    record = {"data": tensors.pop(f"{key}.codes").view(element_storage_dtype(fmt)),
              "scale": tensors.pop(f"{key}.scales").view(scale_storage_dtype(sf)),
              "format": header["element_format"], "scale_format": header["scale_format"], "shape": header["shape"],
              "dim": header["dim"], "block_size": header["block_size"], "dtype": header["dtype"]}
    if header["tensor_scale"] != "none":
        record["tensor_scale"] = tensors.pop(f"{key}.tensor_scale")
    PackedTensor.from_record(record)  # checks shapes and dtypes against the header
    return record


def read_safetensors(path: Path) -> CheckpointContents:
    """The contents of a groupquant safetensors checkpoint (CheckpointError for another file)."""
    st = _safetensors()
    metadata = _metadata(path)
    tensors = st.load_file(str(path))
    layers = json.loads(metadata["layers"])
    try:
        packed = {key: _packed_record(key, header, tensors) for key, header in layers.items()}
    except (KeyError, ValueError) as e:
        raise CheckpointError(f"{path}: a packed weight's tensors do not match its header ({e})") from None
    state = {"format": FORMAT_NAME, "version": STATE_VERSION, "packed": packed, "tensors": tensors,
             "aliases": json.loads(metadata["aliases"]), "quantizer_keys": json.loads(metadata["quantizer_keys"])}
    config = json.loads(metadata["config"]) if "config" in metadata else None
    return CheckpointContents(state, config)
