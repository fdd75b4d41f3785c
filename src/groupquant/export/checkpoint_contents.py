"""What a checkpoint file holds, whatever its format: a packed state dict and the model's config.

Every checkpoint writer (:mod:`.safetensors_checkpoint`, :mod:`.compressed_tensors_checkpoint`,
:mod:`.gguf_checkpoint`) takes a :class:`CheckpointContents` and every reader gives one back, so
the three formats share one route in and out of a model: ``groupquant.save`` builds it with
:func:`~.packed_state_dict.packed_state_dict` (which reads each quantized layer through its
``group_quantized_weight()`` accessor; tied weights and layers registered twice are stored once),
and ``groupquant.load`` hands its state to :func:`~.packed_state_dict.load_packed_state_dict` or
builds :class:`~.packed_linear.PackedLinear` layers from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from ..packing import PackedTensor

__all__ = ["CheckpointContents", "CheckpointError", "packed_tensors", "model_config"]


class CheckpointError(ValueError):
    """A layer a checkpoint format cannot hold, or a file that is not a checkpoint this reader knows
    (the message names the layer or the file, and the format)."""


@dataclass(frozen=True)
class CheckpointContents:
    """A packed state dict (``groupquant.export.packed_state_dict``'s dict: ``packed`` records,
    float ``tensors``, ``aliases``, ``quantizer_keys``), the model's config as a plain dict
    (a Hugging Face ``config.to_dict()``), or None for a model without one, and (GGUF writer
    only) a GGUF file whose ``tokenizer.*`` keys are copied into the file written."""

    state: Dict[str, Any]
    config: Optional[Dict[str, Any]] = field(default=None)
    tokenizer_from: Optional[Path] = field(default=None)


def packed_tensors(state: Dict[str, Any]) -> Dict[str, PackedTensor]:
    """``key -> PackedTensor`` of every packed record of a packed state dict (aliases not repeated)."""
    return {key: PackedTensor.from_record(record) for key, record in state["packed"].items()}


def model_config(model: torch.nn.Module) -> Optional[Dict[str, Any]]:
    """The model's Hugging Face config as a dict (``model.config.to_dict()``), or None."""
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    return to_dict() if callable(to_dict) else None
