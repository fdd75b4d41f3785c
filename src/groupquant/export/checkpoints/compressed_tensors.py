"""compressed-tensors checkpoints (what vLLM and transformers' compressed-tensors loader read).

A directory with:

- ``model.safetensors``: per quantized layer ``<layer>.weight_packed``, ``<layer>.weight_scale``
  and, for NVFP4, ``<layer>.weight_global_scale`` (layout: :mod:`.compressed_tensors_layout`);
  every other state entry (embeddings, norms, float layers, biases) float as it is; a tied weight
  once (under its first name: the config's ``tie_word_embeddings`` ties it again); groupquant's
  quantizer state is not written (it is not part of the format). Its safetensors metadata holds
  ``format: pt`` and a ``groupquant`` JSON entry (the aliases, each weight's dtype and exact tensor
  scale) that vLLM ignores and groupquant reads back.
- ``config.json``: the model's Hugging Face config (if it has one) with ``dtype`` (and the older
  ``torch_dtype``) set to ``bfloat16``, the dtype compressed-tensors decompresses FP4 weights to:
  transformers' default ``from_pretrained(folder)`` then builds the model in that dtype and runs it
  (a float32 or float16 model with bfloat16 weights would fail at the first matmul); and the ``quantization_config``
  that compressed-tensors itself writes (its ``ModelCompressor.update_config``): one config group
  per scheme (``NVFP4A16`` / ``MXFP4A16`` weights, formats ``nvfp4-pack-quantized`` /
  ``mxfp4-pack-quantized``), whose ``targets`` are the quantized layers' names; ``format`` is the
  one format or ``mixed-precision``; status ``compressed``.

Writing needs the ``compressed-tensors`` package (it writes the config); reading needs safetensors only.
Activation quantizers are not recorded (the schemes are weight-only, A16). A model with an online
rotation (``rotate_model``) is refused (:func:`.contents.refuse_online_rotations`). The
files are written into a directory beside the target and moved in once whole (:mod:`.atomic_write`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import torch

from ...packing import PackedTensor
from .atomic_write import directory_written_beside
from .contents import CheckpointContents, packed_tensors, refuse_online_rotations
from ..errors import CheckpointError
from .compressed_tensors_layout import CTScheme, ct_layer_tensors, ct_scheme_of, packed_from_ct
from .packed_state_dict import FORMAT_NAME, FORMAT_VERSION

__all__ = ["write_compressed_tensors", "read_compressed_tensors", "WEIGHTS_FILE"]

#: The weights file of a checkpoint directory groupquant writes.
WEIGHTS_FILE = "model.safetensors"
_PACKED_SUFFIXES = (".weight_packed", ".weight_scale", ".weight_global_scale")
_DTYPES = {str(d): d for d in (torch.float32, torch.bfloat16, torch.float16)}
#: the dtype compressed-tensors decompresses FP4 weights to (``unpack_fp4_from_uint8``), written as the config's dtype
DECOMPRESSED_DTYPE = "bfloat16"


def _needs(what: str):
    """Import error text naming the extra."""
    return (f"groupquant.save/load with format='compressed-tensors' needs {what}; "
            "install it with: pip install 'groupquant[llm]'")


def _layer_name(key: str) -> str:
    """``fc.weight`` -> ``fc``."""
    return key[:-len(".weight")] if key.endswith(".weight") else key


def _quantization_config(groups: Dict[CTScheme, List[str]]) -> Any:
    """compressed-tensors' QuantizationConfig with one config group per scheme (targets: layer names)."""
    try:
        from compressed_tensors.quantization import QuantizationConfig, QuantizationScheme, QuantizationStatus
        from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
    except ImportError as e:
        raise ImportError(_needs(f"the compressed-tensors package ({e})")) from e
    config_groups = {f"group_{i}": QuantizationScheme(targets=names, format=s.format, **PRESET_SCHEMES[s.preset])
                     for i, (s, names) in enumerate(groups.items())}
    fmt = next(iter(groups)).format if len(groups) == 1 else "mixed-precision"
    return QuantizationConfig(config_groups=config_groups, format=fmt,
                              quantization_status=QuantizationStatus.COMPRESSED)


def write_compressed_tensors(contents: CheckpointContents, path: Path) -> None:
    """Write ``contents`` into directory ``path`` (created; see the module docstring)."""
    try:
        from safetensors.torch import save_file
    except ImportError as e:
        raise ImportError(_needs(f"the safetensors package ({e})")) from e
    refuse_online_rotations(contents.state, "compressed-tensors", "transformers and vLLM")
    state = contents.state
    tensors: Dict[str, torch.Tensor] = {}
    groups: Dict[CTScheme, List[str]] = {}
    extra: Dict[str, Any] = {"aliases": state["aliases"], "dtypes": {}, "tensor_scales": {}}
    for key, p in packed_tensors(state).items():
        name = _layer_name(key)
        scheme = ct_scheme_of(p, name)
        tensors.update({f"{name}.{k}": v for k, v in ct_layer_tensors(p, name).items()})
        groups.setdefault(scheme, []).append(name)
        extra["dtypes"][key] = str(p.dtype)
        if p.tensor_scale is not None:
            extra["tensor_scales"][key] = float(p.tensor_scale).hex()
    if not groups:
        raise CheckpointError("compressed-tensors: the model has no NVFP4 or MXFP4 quantized layer to write "
                              "(quantize it first, or save with format='safetensors')")
    skip = set(state["quantizer_keys"])
    tensors.update({k: v.contiguous() for k, v in state["tensors"].items() if k not in skip})
    quant_config = _quantization_config(groups)
    config = dict(contents.config or {})
    if contents.config is not None:  # the model's own dtype keys go in groupquant's metadata, read back by load
        extra["config_dtype"] = {k: config.get(k) for k in ("dtype", "torch_dtype")}
        config["dtype"] = config["torch_dtype"] = DECOMPRESSED_DTYPE
    from compressed_tensors.compressors import ModelCompressor
    with directory_written_beside(path) as tmp:
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt", "groupquant": json.dumps(extra)})
        with open(tmp / "config.json", "w") as f:
            json.dump(config, f, indent=2, sort_keys=True, default=str)
        ModelCompressor(quantization_config=quant_config).update_config(str(tmp))


def _config(path: Path) -> Dict[str, Any]:
    """config.json of a compressed-tensors checkpoint; CheckpointError names what is missing or unsupported."""
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(f"{path}: a compressed-tensors checkpoint directory has a config.json; none found")
    with open(config_file) as f:
        config = json.load(f)
    qc = config.get("quantization_config")
    if not isinstance(qc, dict) or qc.get("quant_method") != "compressed-tensors":
        raise CheckpointError(f"{config_file}: no quantization_config with quant_method 'compressed-tensors'")
    formats = {g.get("format") or qc.get("format") for g in qc.get("config_groups", {}).values() if isinstance(g, dict)}
    unknown = formats - {"nvfp4-pack-quantized", "mxfp4-pack-quantized"}
    if unknown:
        raise CheckpointError(f"{config_file}: groupquant reads the compressed-tensors formats nvfp4-pack-quantized "
                              f"and mxfp4-pack-quantized; this checkpoint has {sorted(map(str, unknown))}")
    return config


def _default_dtype(config: Dict[str, Any]) -> torch.dtype:
    """The dtype packed weights dequantize to: the config's ``torch_dtype`` / ``dtype``, else bfloat16."""
    name = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return _DTYPES.get(name if name.startswith("torch.") else f"torch.{name}", torch.bfloat16)


def _load_tensors(path: Path) -> Dict[str, Any]:
    """Every tensor of the directory's safetensors files, and groupquant's metadata entry (or {})."""
    try:
        from safetensors import safe_open
    except ImportError as e:
        raise ImportError(_needs(f"the safetensors package ({e})")) from e
    tensors: Dict[str, torch.Tensor] = {}
    extra: Dict[str, Any] = {}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no .safetensors file in the compressed-tensors checkpoint directory")
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            extra.update(json.loads((f.metadata() or {}).get("groupquant", "{}")))
            tensors.update({k: f.get_tensor(k) for k in f.keys()})
    return {"tensors": tensors, "extra": extra}


def read_compressed_tensors(path: Path) -> CheckpointContents:
    """The contents of a compressed-tensors NVFP4 / MXFP4 checkpoint directory (packed weights as
    they are; weights of other formats are refused by name)."""
    config = _config(path)
    loaded = _load_tensors(path)
    tensors, extra = loaded["tensors"], loaded["extra"]
    layers = sorted({k[:-len(".weight_packed")] for k in tensors if k.endswith(".weight_packed")})
    dtype = _default_dtype(config)
    packed: Dict[str, Dict[str, Any]] = {}
    for name in layers:
        own = {s[1:]: tensors.pop(f"{name}{s}") for s in _PACKED_SUFFIXES if f"{name}{s}" in tensors}
        key = f"{name}.weight"
        ts = extra.get("tensor_scales", {}).get(key)
        p: PackedTensor = packed_from_ct(own, name, _DTYPES.get(extra.get("dtypes", {}).get(key), dtype),
                                         None if ts is None else torch.tensor(float.fromhex(ts)))
        packed[key] = p.to_record()
    leftovers = [k for k in tensors if k.endswith(_PACKED_SUFFIXES) or k.endswith(".weight_zero_point")]
    if leftovers:
        raise CheckpointError(f"{path}: quantization tensors without a weight_packed: {leftovers[:4]}")
    state = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "packed": packed, "tensors": tensors,
             "aliases": extra.get("aliases", {}), "quantizer_keys": []}
    config = {k: v for k, v in config.items() if k != "quantization_config"}
    for key, value in extra.get("config_dtype", {}).items():  # the model's own dtype, as groupquant wrote it
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return CheckpointContents(state, config or None)
