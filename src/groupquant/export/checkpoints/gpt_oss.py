"""gpt-oss MXFP4 checkpoints (one safetensors file of ``<name>_blocks`` / ``<name>_scales`` pairs), read only.

A row of the checkpoint format table (:mod:`.format_table`): ``groupquant.load(path)`` of such a file
returns a ``LoadedCheckpoint`` whose layers are packed MXFP4 linears, decoded byte for byte as
:mod:`.mxfp4` describes (the published layout; the bytes are used as they are).

Per pair (``<name>_scales`` beside ``<name>_blocks``, uint8):

- blocks ``[rows, G, 16]``: one packed weight, layer ``<name>``, with its bias ``<name>_bias`` ``[rows]``
  where the file has one;
- blocks ``[E, rows, G, 16]`` (a stack of experts): one packed weight per expert, layers ``<name>.0`` ...
  ``<name>.{E-1}``, with row ``e`` of a ``<name>_bias`` ``[E, rows]``.

Every other tensor is kept under its own key. The file is recognised without the safetensors package by
its header: JSON holding at least one such pair and no groupquant ``format`` metadata.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from ..errors import CheckpointError
from .contents import CheckpointContents
from .mxfp4 import mxfp4_packed_tensor
from .packed_state_dict import FORMAT_NAME, FORMAT_VERSION

__all__ = ["is_gpt_oss_mxfp4", "read_gpt_oss_mxfp4"]

_BLOCKS, _SCALES, _BIAS = "_blocks", "_scales", "_bias"
#: The largest safetensors JSON header looked at when recognising a file (bytes).
_MAX_HEADER = 100 * 2**20


def _safetensors_header(path: Path) -> Optional[Dict[str, Any]]:
    """The JSON header of safetensors file ``path`` (u64 little-endian length, then JSON), or None
    where the file does not start like one."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return None
        size = int.from_bytes(head, "little")
        if not 2 <= size <= _MAX_HEADER:
            return None
        try:
            header = json.loads(f.read(size))
        except ValueError:
            return None
    return header if isinstance(header, dict) else None


def _pair_names(keys) -> list:
    """``<name>`` of every ``<name>_blocks`` key that has its ``<name>_scales`` among ``keys``."""
    keys = set(keys)
    return sorted(k[:-len(_BLOCKS)] for k in keys if k.endswith(_BLOCKS) and k[:-len(_BLOCKS)] + _SCALES in keys)


def is_gpt_oss_mxfp4(path: Path) -> bool:
    """True for a safetensors file without groupquant's metadata holding ``_blocks`` / ``_scales`` pairs."""
    if not path.is_file():
        return False
    header = _safetensors_header(path)
    if header is None:
        return False
    metadata = header.get("__metadata__") or {}
    return metadata.get("format") != "groupquant" and bool(_pair_names(header))


def _load_file(path: Path) -> Dict[str, torch.Tensor]:
    """Every tensor of safetensors file ``path``; ImportError naming the extra without the package."""
    try:
        from safetensors.torch import load_file
    except ImportError as e:
        raise ImportError(f"groupquant.load of a gpt-oss MXFP4 checkpoint needs the safetensors package ({e}); "
                          "install it with: pip install 'groupquant[llm]'") from e
    return load_file(str(path))


def read_gpt_oss_mxfp4(path: Path) -> CheckpointContents:
    """The contents of gpt-oss MXFP4 file ``path`` (see the module docstring): a packed record per
    weight (per expert of a stack), the other tensors as they are, no config."""
    tensors = _load_file(path)
    packed: Dict[str, Any] = {}
    for name in _pair_names(tensors):
        blocks, scales = tensors.pop(name + _BLOCKS), tensors.pop(name + _SCALES)
        bias = tensors.pop(name + _BIAS, None)
        if blocks.dim() == 3:
            packed[name] = mxfp4_packed_tensor(blocks, scales, name=name).to_record()
            if bias is not None:
                tensors[f"{name}.bias"] = bias
        elif blocks.dim() == 4 and scales.dim() == 3 and scales.shape[0] == blocks.shape[0]:
            for e in range(int(blocks.shape[0])):
                packed[f"{name}.{e}"] = mxfp4_packed_tensor(blocks[e], scales[e], name=f"{name}.{e}").to_record()
                if bias is not None:
                    tensors[f"{name}.{e}.bias"] = bias[e]
        else:
            raise CheckpointError(f"{path}: gpt-oss MXFP4 {name!r}: blocks must be [rows, G, 16] or [E, rows, G, 16] "
                                  f"with scales [rows, G] / [E, rows, G], got {tuple(blocks.shape)} and "
                                  f"{tuple(scales.shape)}")
    state = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "packed": packed, "tensors": tensors,
             "aliases": {}, "quantizer_keys": []}
    return CheckpointContents(state)
