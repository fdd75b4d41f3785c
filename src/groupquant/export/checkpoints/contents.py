"""What a checkpoint file holds, whatever its format: a packed state dict and the model's config.

Every checkpoint writer (:mod:`.safetensors`, :mod:`.compressed_tensors`,
:mod:`.gguf`) takes a :class:`CheckpointContents` and every reader gives one back, so
the three formats share one route in and out of a model: ``groupquant.save`` builds it with
:func:`~.packed_state_dict.packed_state_dict` (which reads each quantized layer through its
``group_quantized_weight()`` accessor; tied weights and layers registered twice are stored once),
and ``groupquant.load`` hands its state to :func:`~.packed_state_dict.load_packed_state_dict` or
builds :class:`~..inference.packed_linear.PackedLinear` layers from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from ...nn.layers.input_rotation import MATRIX_KEY, ROTATION_ATTR
from ...packing import PackedTensor
from ..errors import CheckpointError

__all__ = ["CheckpointContents", "packed_tensors", "model_config", "rope_settings",
           "rotation_keys", "refuse_online_rotations"]

#: The last two parts of the state-dict keys of online rotations (``groupquant.calib.rotate_model``):
#: a quant layer's input rotation (``<layer>.input_rotation.block_size_``, and ``.matrix`` for a
#: learned one: ``groupquant.calib.learned_rotation``) and the two residual
#: rotations around a final norm of a fused-rotation model with a tied head (``<norm>.rotate.signs``,
#: ``<norm>.unrotate.signs``: ``groupquant.calib.rotated_norm.RotatedNorm``).
_ROTATION_ENDINGS = ((ROTATION_ATTR, "block_size_"), (ROTATION_ATTR, MATRIX_KEY), ("rotate", "signs"),
                     ("unrotate", "signs"))



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


def rope_settings(config: Dict[str, Any]) -> Dict[str, Any]:
    """The RoPE settings of a Hugging Face config dict, in one form whatever the transformers version
    that wrote it: ``rope_parameters`` (transformers 5) or ``rope_scaling`` (4.x), with the
    top-level ``rope_theta`` where the dict has none, and ``rope_type`` (from ``type`` where only
    that is given; ``default`` without scaling). Empty for a config without RoPE settings."""
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    if config.get("rope_theta") is not None:
        params.setdefault("rope_theta", config["rope_theta"])
    if not params:
        return {}
    if "rope_type" not in params:
        params["rope_type"] = params.pop("type", "default")
    params.pop("type", None)
    return params


def rotation_keys(keys) -> List[str]:
    """The keys among ``keys`` that hold an online rotation's state (see ``_ROTATION_ENDINGS``)."""
    return [k for k in keys if tuple(k.split(".")[-2:]) in _ROTATION_ENDINGS]


def refuse_online_rotations(state: Dict[str, Any], fmt: str, readers: str) -> None:
    """CheckpointError naming the first rotated module when the packed state holds an online rotation.

    Rule: a format other programs read (``fmt``, read by ``readers``) holds weights those programs
    multiply as they are. ``rotate_model`` stores a layer's weight rotated (``W H``) and rotates its
    input inside the layer; a reader that does not know the rotation computes ``x (W H)^T``, another
    function. The rotation cannot be folded back into a quantized weight (``Q(W H) H^T`` is off the
    element grid), so the writer refuses rather than write a file that runs wrong."""
    keys = rotation_keys(state["tensors"])
    if not keys:
        return
    where = keys[0].rsplit(".", 2)[0]
    raise CheckpointError(
        f"{fmt}: {where!r} applies an online Hadamard rotation (groupquant.calib.rotate_model, the 'rotate' "
        f"calibration method; {len(keys)} rotation(s) in the model) that {readers} do not apply: its weights are "
        "stored rotated and would compute another function there, and the rotation cannot be folded into quantized "
        "weights. Calibrate without 'rotate' / 'learn_rotations' (e.g. ptq(..., methods=['smooth', 'scale_search', 'gptq']) or "
        "llm --methods smooth,scale_search,gptq), or save with format='safetensors' and load with groupquant.load")
