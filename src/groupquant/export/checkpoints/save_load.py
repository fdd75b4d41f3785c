"""``groupquant.save`` / ``groupquant.load``: one entry for safetensors, compressed-tensors and GGUF checkpoints.

``save(model, path, format=...)`` reads the model once into a packed state dict
(:func:`~.packed_state_dict.packed_state_dict`: every group-quantized weight through its layer's
``group_quantized_weight()``, every other entry float as it is, tied weights and layers registered
twice stored once) and hands it, with the model's Hugging Face config where it has one, to the
format's writer:

- ``"safetensors"``: groupquant's own packed file (:mod:`.safetensors`), any packed format;
- ``"compressed-tensors"``: a directory (``model.safetensors`` + ``config.json``) that the
  compressed-tensors package and vLLM read, MXFP4 and NVFP4 layers (:mod:`.compressed_tensors`);
- ``"gguf"``: one GGUF file, MXFP4 and NVFP4 layers, llama.cpp names for a Llama model (:mod:`.gguf`).

The formats are the rows of one table (:mod:`.format_table`: name, detect, write, read); ``save`` and
``load`` read only that table.

Every writer refuses what its readers cannot compute (a weight format the target lacks, an online
rotation in compressed-tensors / GGUF) before it writes, and writes beside the path, then renames
(:mod:`.atomic_write`): a failed save leaves the old checkpoint as it was.

``load(path, model=None)`` reads any of the three, and gpt-oss MXFP4 files (:mod:`.gpt_oss`, read only),
told apart by the table's ``detect`` (a directory is compressed-tensors, a file starting with ``GGUF``
is GGUF, a safetensors file of ``*_blocks`` / ``*_scales`` pairs is gpt-oss, else safetensors); a file it cannot
read (empty, truncated, not a checkpoint) raises :class:`CheckpointError` naming the file. Into a
``model`` (the quantized model, its float twin, or a packed model) it loads as
:func:`~.packed_state_dict.load_packed_state_dict` does and returns the model; a weight of another
format or shape is refused by name (the layer, what the file has, what the model has), and so is a
model whose config differs in a setting that changes the function but no shape, or that would not
apply an online rotation the file holds (:mod:`.fit`). Without a model it returns a
:class:`LoadedCheckpoint`: a :class:`~..inference.packed_linear.PackedLinear` per packed weight (with its
bias and its online input rotation, if any) and the other tensors.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from ...packing import PackedTensor
from ...proxy import QuantProxy
from .contents import CheckpointContents, model_config
from ..errors import CheckpointError
from .fit import attach_input_rotations, check_config, check_rotations
from .format_table import CHECKPOINT_FORMATS, CheckpointFormat, format_named, format_of
from ..errors import PackError
from ..inference.packed_linear import PackedLinear
from .packed_state_dict import _check, load_packed_state_dict, packed_state_dict

__all__ = ["save", "load", "check_weight_format", "LoadedCheckpoint", "CHECKPOINT_FORMATS"]

PathLike = Union[str, Path]


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint read without a model.

    Fields:
        layers: ``layer name -> PackedLinear`` for every packed 2-D weight (a weight stored once
            under several names is one layer under each name); the layer's bias is its ``bias``,
            and the online input rotation the file records for it (``rotate_model``) its ``input_rotation``.
        tensors: every other entry (embeddings, norms, float weights, biases of float layers), by state-dict key.
        config: the model's Hugging Face config as a dict, or None.
        format: which row of the format table the file is (one of :data:`CHECKPOINT_FORMATS`, or
            ``"gpt-oss-mxfp4"``).
    """

    layers: Dict[str, PackedLinear]
    tensors: Dict[str, torch.Tensor]
    config: Optional[Dict[str, Any]]
    format: str


def check_weight_format(fmt: str, packed: PackedTensor, where: str) -> None:
    """CheckpointError (naming ``where`` and the weight's format) when checkpoint format ``fmt``
    cannot hold the packed weight ``packed``: the writers' own per-layer rule, usable before any
    model is quantized (e.g. on one probe layer of a recipe)."""
    row = format_named(fmt)
    if row.weight_check is not None:
        row.function(row.weight_check)(packed, where)


def _check_target(path: Path, fmt: CheckpointFormat) -> None:
    """CheckpointError when ``path`` is a directory for a one-file format, or a file for a directory format."""
    if fmt.directory and path.exists() and not path.is_dir():
        raise CheckpointError(f"groupquant.save: format={fmt.name!r} writes a directory; {path} is a file")
    if not fmt.directory and path.is_dir():
        raise CheckpointError(f"groupquant.save: format={fmt.name!r} writes one file; {path} is a directory (give a "
                              "file path inside it)")


def _warn_weights_only(model: nn.Module, fmt: str) -> None:
    """UserWarning when ``fmt`` (compressed-tensors, GGUF: weights only) drops input quantizers of ``model``."""
    if fmt == "safetensors":
        return
    names = [name for name, m in model.named_modules()
             if isinstance(getattr(m, "input_quant", None), QuantProxy) and m.input_quant.is_quant_enabled]
    if names:
        warnings.warn(f"groupquant.save(format={fmt!r}): {len(names)} layer(s) quantize their inputs (e.g. "
                      f"{names[0]!r}); {fmt} records the weights only, so its readers run those inputs in float "
                      "(the weight-only model); groupquant.load into the quantized model keeps them",
                      UserWarning, stacklevel=3)


def save(model: nn.Module, path: PathLike, format: str = "safetensors", *,
         tokenizer_from: Optional[PathLike] = None) -> Path:
    """Write ``model`` to ``path`` in ``format`` (see the module docstring); returns the path.

    ``tokenizer_from`` (GGUF only): a GGUF file (e.g. the one the model was loaded from) whose
    ``tokenizer.*`` keys are copied, which llama.cpp needs to run the file. A layer whose weight
    format the target cannot hold raises :class:`CheckpointError` naming the layer and the format
    (e.g. an MXFP6 layer to GGUF); a model with an online rotation is refused in compressed-tensors
    and GGUF, whose readers would not apply it. Those two formats record weights only: a model
    that quantizes layer inputs gets a UserWarning (the readers run the weight-only model)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"groupquant.save: model must be a torch.nn.Module, got {type(model).__name__}")
    row = format_named(format)
    if tokenizer_from is not None and format != "gguf":
        raise ValueError(f"groupquant.save: tokenizer_from is for format='gguf' (GGUF tokenizer keys), got "
                         f"format={format!r}")
    path = Path(path)
    _check_target(path, row)
    _warn_weights_only(model, format)
    contents = CheckpointContents(_on_cpu(packed_state_dict(model)), model_config(model),
                                  None if tokenizer_from is None else Path(tokenizer_from))
    row.function(row.write)(contents, path)
    return path


def _on_cpu(state: Dict[str, Any]) -> Dict[str, Any]:
    """A packed state dict with every tensor (records included) on the CPU: the writers store host
    memory (a model saved from a GPU)."""
    return tree_map_only(torch.Tensor, lambda t: t.cpu(), state)


def _read(path: Path, fmt: CheckpointFormat) -> CheckpointContents:
    """The contents of checkpoint ``path`` of format ``fmt``; CheckpointError naming the file when the
    reader fails on it (truncated, corrupt, not a checkpoint of that format)."""
    try:
        return fmt.function(fmt.read)(path)
    except (CheckpointError, ImportError):
        raise
    except Exception as e:  # the format packages' own errors (numpy, struct, safetensors, json, ...)
        raise CheckpointError(f"groupquant.load: {path} is not a readable {fmt.name} checkpoint (truncated or "
                              f"corrupt?): {type(e).__name__}: {e}") from e


def _packed_layers(state: Dict[str, Any], fmt: str) -> LoadedCheckpoint:
    """PackedLinear layers (with their biases) from the packed weights of a full (aliases filled) state."""
    tensors = dict(state["tensors"])
    layers: Dict[str, PackedLinear] = {}
    made: Dict[int, PackedLinear] = {}
    for key, record in state["packed"].items():
        name = key[:-len(".weight")] if key.endswith(".weight") else key
        if id(record) not in made:
            try:
                made[id(record)] = PackedLinear.from_packed(PackedTensor.from_record(record),
                                                            tensors.get(f"{name}.bias"), name=name)
            except PackError as e:
                raise CheckpointError(f"groupquant.load: {e}; pass the model to load it into") from None
        tensors.pop(f"{name}.bias", None)
        layers[name] = made[id(record)]
    attach_input_rotations(layers, tensors)
    return LoadedCheckpoint(layers, tensors, None, fmt)


def _tied_in_model(model: nn.Module, state: Dict[str, Any]) -> Dict[str, Any]:
    """``state`` with an alias for each model entry the file lacks whose tensor is tied to an entry
    the file holds (a tied output head that a file stores once, as Hugging Face checkpoints do)."""
    held = set(state["packed"]) | set(state["tensors"])
    known = held | set(state["aliases"])
    groups: Dict[int, list] = {}
    for key, t in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(t), []).append(key)
    aliases = dict(state["aliases"])
    for keys in groups.values():
        source = next((k for k in keys if k in held), None)
        if source is not None:
            aliases.update({k: source for k in keys if k not in known})
    return dict(state, aliases=aliases)


def load(path: PathLike, model: Optional[nn.Module] = None, *, strict: bool = True
         ) -> Union[nn.Module, LoadedCheckpoint]:
    """Read checkpoint ``path`` (any of :data:`CHECKPOINT_FORMATS`) into ``model`` and return it, or,
    with ``model=None``, return a :class:`LoadedCheckpoint` of PackedLinear layers and tensors.

    ``strict``: as ``nn.Module.load_state_dict`` (quantizer entries the model lacks are skipped).
    A packed weight of another format, block or shape than the model's layer raises
    :class:`~..errors.PackError` naming the layer, what the file has and what the model has."""
    path = Path(path)
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"groupquant.load: model must be a torch.nn.Module or None, got {type(model).__name__}")
    fmt = format_of(path)
    contents = _read(path, fmt)
    if model is None:
        loaded = _packed_layers(_check(contents.state), fmt.name)
        return LoadedCheckpoint(loaded.layers, loaded.tensors, contents.config, fmt.name)
    check_config(path, contents.config, model)
    check_rotations(path, _check(contents.state)["tensors"], model)
    load_packed_state_dict(model, _tied_in_model(model, contents.state), strict=strict)
    return model
