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

Every writer refuses what its readers cannot compute (a weight format the target lacks, an online
rotation in compressed-tensors / GGUF) before it writes, and writes beside the path, then renames
(:mod:`.atomic_write`): a failed save leaves the old checkpoint as it was.

``load(path, model=None)`` reads any of the three (told apart by the file: a directory is
compressed-tensors, a file starting with ``GGUF`` is GGUF, else safetensors); a file it cannot
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

from ...packing import PackedTensor
from ...proxy import QuantProxy
from .contents import CheckpointContents, model_config
from ..errors import CheckpointError
from .fit import attach_input_rotations, check_config, check_rotations
from ..errors import PackError
from ..inference.packed_linear import PackedLinear
from .packed_state_dict import _check, load_packed_state_dict, packed_state_dict

__all__ = ["save", "load", "check_weight_format", "LoadedCheckpoint", "CHECKPOINT_FORMATS"]

#: The ``format=`` values of :func:`save`.
CHECKPOINT_FORMATS = ("safetensors", "compressed-tensors", "gguf")

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
        format: which of :data:`CHECKPOINT_FORMATS` the file is.
    """

    layers: Dict[str, PackedLinear]
    tensors: Dict[str, torch.Tensor]
    config: Optional[Dict[str, Any]]
    format: str


def _writer(fmt: str):
    """The writer function of ``fmt``; ValueError names the setting."""
    if fmt == "safetensors":
        from .safetensors import write_safetensors
        return write_safetensors
    if fmt == "compressed-tensors":
        from .compressed_tensors import write_compressed_tensors
        return write_compressed_tensors
    if fmt == "gguf":
        from .gguf import write_gguf
        return write_gguf
    raise ValueError(f"groupquant.save: format={fmt!r} is not one of {list(CHECKPOINT_FORMATS)}")


def check_weight_format(fmt: str, packed: PackedTensor, where: str) -> None:
    """CheckpointError (naming ``where`` and the weight's format) when checkpoint format ``fmt``
    cannot hold the packed weight ``packed``: the writers' own per-layer rule, usable before any
    model is quantized (e.g. on one probe layer of a recipe)."""
    _writer(fmt)
    if fmt == "compressed-tensors":
        from .compressed_tensors_layout import ct_scheme_of
        ct_scheme_of(packed, where)
    elif fmt == "gguf":
        from .gguf import check_gguf_weight
        check_gguf_weight(packed, where)


def _check_target(path: Path, fmt: str) -> None:
    """CheckpointError when ``path`` is a directory for a one-file format, or a file for compressed-tensors."""
    if fmt == "compressed-tensors" and path.exists() and not path.is_dir():
        raise CheckpointError(f"groupquant.save: format='compressed-tensors' writes a directory; {path} is a file")
    if fmt != "compressed-tensors" and path.is_dir():
        raise CheckpointError(f"groupquant.save: format={fmt!r} writes one file; {path} is a directory (give a file "
                              "path inside it)")


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
    write = _writer(format)
    if tokenizer_from is not None and format != "gguf":
        raise ValueError(f"groupquant.save: tokenizer_from is for format='gguf' (GGUF tokenizer keys), got "
                         f"format={format!r}")
    path = Path(path)
    _check_target(path, format)
    _warn_weights_only(model, format)
    contents = CheckpointContents(packed_state_dict(model), model_config(model),
                                  None if tokenizer_from is None else Path(tokenizer_from))
    write(contents, path)
    return path


def _format_of(path: Path) -> str:
    """Which checkpoint format ``path`` is (a directory: compressed-tensors; magic ``GGUF``: GGUF; else safetensors)."""
    if path.is_dir():
        return "compressed-tensors"
    if not path.is_file():
        raise FileNotFoundError(f"groupquant.load: no checkpoint at {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if not magic:
        raise CheckpointError(f"groupquant.load: {path} is empty (0 bytes), not a checkpoint")
    return "gguf" if magic == b"GGUF" else "safetensors"


def _reader(fmt: str):
    """The reader function of ``fmt``."""
    if fmt == "compressed-tensors":
        from .compressed_tensors import read_compressed_tensors
        return read_compressed_tensors
    if fmt == "gguf":
        from .gguf import read_gguf
        return read_gguf
    from .safetensors import read_safetensors
    return read_safetensors


def _read(path: Path, fmt: str) -> CheckpointContents:
    """The contents of checkpoint ``path`` of format ``fmt``; CheckpointError naming the file when the
    reader fails on it (truncated, corrupt, not a checkpoint of that format)."""
    read = _reader(fmt)
    try:
        return read(path)
    except (CheckpointError, ImportError):
        raise
    except Exception as e:  # the format packages' own errors (numpy, struct, safetensors, json, ...)
        raise CheckpointError(f"groupquant.load: {path} is not a readable {fmt} checkpoint (truncated or corrupt?): "
                              f"{type(e).__name__}: {e}") from e


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
    fmt = _format_of(path)
    contents = _read(path, fmt)
    if model is None:
        loaded = _packed_layers(_check(contents.state), fmt)
        return LoadedCheckpoint(loaded.layers, loaded.tensors, contents.config, fmt)
    check_config(path, contents.config, model)
    check_rotations(path, _check(contents.state)["tensors"], model)
    load_packed_state_dict(model, _tied_in_model(model, contents.state), strict=strict)
    return model
