"""Whether a checkpoint fits the model ``groupquant.load`` reads it into, beyond tensor shapes.

Two things a state dict's shapes do not show, each refused by name (whatever ``strict`` says,
since loading would give a model that computes another function without a word):

- the model's architecture settings: a file written from a model whose config differs from the
  target model's config in a setting that changes the function but no tensor shape (head counts,
  head size, RoPE, norm epsilon, activation, tied head, ...: :data:`FUNCTION_KEYS`), where both have
  a Hugging Face config holding the setting;
- online rotations (``groupquant.calib.rotate_model``): a rotated layer's weight is stored rotated,
  so the rotation must come back with it. A quant layer re-creates its input rotation from the
  state dict (``QuantLayerMixin``); any other module the file's rotation belongs to must already be
  rotated in the model (a float ``nn.Linear`` twin takes no rotation; the residual rotation around
  the final norm of a fused-rotation model with a tied head, ``RotatedNorm``, is not rebuilt from a
  state dict: run ``rotate_model(model, fused_residual=True)`` on the model first).

Without a model, :func:`attach_input_rotations` gives each packed layer the input rotation the
file records for it, so ``groupquant.load(path).layers`` compute what the saved layers computed.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import torch
from torch import nn

from ...nn import QuantLayerMixin
from ...nn.layers.input_rotation import MATRIX_KEY, ROTATION_ATTR, InputRotation, LearnedInputRotation
from .contents import model_config, rope_settings, rotation_keys
from ..errors import CheckpointError
from ..inference.packed_linear import PackedLinear

__all__ = ["FUNCTION_KEYS", "check_config", "check_rotations", "attach_input_rotations"]

#: Hugging Face config settings that change a model's function without changing a tensor's shape
#: (RoPE: ``rope`` stands for the settings :func:`.contents.rope_settings` gathers).
FUNCTION_KEYS = ("model_type", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
                 "hidden_activation", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope",
                 "partial_rotary_factor", "tie_word_embeddings", "sliding_window", "n_head",
                 "attn_logit_softcapping", "final_logit_softcapping")


def _settings(config: Mapping[str, Any]) -> Dict[str, Any]:
    """The config's :data:`FUNCTION_KEYS` that it gives a value (None: not given)."""
    out = {k: config[k] for k in FUNCTION_KEYS if config.get(k) is not None}
    rope = rope_settings(dict(config))
    if rope:
        out["rope"] = rope
    return out


def check_config(path: Any, file_config: Optional[Mapping[str, Any]], model: nn.Module) -> None:
    """CheckpointError naming the first setting of :data:`FUNCTION_KEYS` that both configs give with
    different values (the file's and the model's); nothing where either has no config."""
    own_config = model_config(model)
    if not file_config or not own_config:
        return
    theirs, own = _settings(file_config), _settings(own_config)
    for key in FUNCTION_KEYS:
        if key in theirs and key in own and theirs[key] != own[key]:
            raise CheckpointError(f"groupquant.load: {path} was written from a model with {key}={theirs[key]!r}; "
                                  f"the model loaded into has {key}={own[key]!r}: the tensors have the same shapes "
                                  "but the model would compute another function. Load it into a model built from "
                                  "the checkpoint's config")


def check_rotations(path: Any, tensors: Mapping[str, torch.Tensor], model: nn.Module) -> None:
    """CheckpointError naming the first online rotation of the file that ``model`` would not apply
    (module docstring)."""
    own = set(model.state_dict())
    modules = dict(model.named_modules())
    for key in rotation_keys(tensors):
        if key in own:
            continue
        owner = key.rsplit(".", 2)[0]
        if key.endswith((f"{ROTATION_ATTR}.block_size_", f"{ROTATION_ATTR}.{MATRIX_KEY}")) \
                and isinstance(modules.get(owner), QuantLayerMixin):
            continue  # a quant layer re-creates its input rotation from the state dict
        raise CheckpointError(
            f"groupquant.load: {path} holds an online rotation ({key}) that the model does not apply: {owner!r} "
            f"is {type(modules[owner]).__name__ if owner in modules else 'missing'}; its weights are stored rotated, "
            "so the model would compute another function. Load into the quantized model (groupquant.quantize_model "
            "/ ptq), and for a fused residual rotation run groupquant.calib.rotate_model(model, fused_residual=True) "
            "on it first")


def attach_input_rotations(layers: Dict[str, PackedLinear], tensors: Dict[str, torch.Tensor]) -> None:
    """Give each layer of ``layers`` the input rotation the file records for it (removing its entry
    from ``tensors``); in place."""
    for name, layer in layers.items():
        key = f"{name}.{ROTATION_ATTR}.block_size_" if name else f"{ROTATION_ATTR}.block_size_"
        matrix = tensors.pop(key[:-len("block_size_")] + MATRIX_KEY, None)
        if key in tensors:
            if getattr(layer, ROTATION_ATTR, None) is None:
                rotation = InputRotation(int(tensors[key])) if matrix is None else LearnedInputRotation(matrix)
                setattr(layer, ROTATION_ATTR, rotation)
            tensors.pop(key)
