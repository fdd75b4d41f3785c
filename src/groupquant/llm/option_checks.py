"""What the ``llm`` workflow checks before it loads a model, so that a run that cannot finish
stops in a second with one line instead of after the whole workflow:

- ``--save DIR``: DIR is a folder or does not exist yet (not a file);
- ``--format``: the checkpoint format holds the recipe's weight format (the writers' own per-layer
  rule, :func:`groupquant.export.checkpoints.save_load.check_weight_format`, on one probe layer of the recipe:
  GGUF and compressed-tensors hold MXFP4 and NVFP4 only);
- ``--methods`` with ``--format gguf`` / ``compressed-tensors``: no ``rotate`` among the methods
  that will run (its online rotation is refused by those writers: llama.cpp, transformers and
  vLLM would compute another function).
"""
from __future__ import annotations

import os
from typing import Any

from .errors import LlmInputError

__all__ = ["check_save_options"]

#: checkpoint formats whose readers do not apply groupquant's online rotations
_FOREIGN_READERS = {"gguf": "llama.cpp and transformers' GGUF loader",
                    "compressed-tensors": "transformers and vLLM"}


def _check_save_dir(save_dir: str) -> None:
    if os.path.exists(save_dir) and not os.path.isdir(save_dir):
        raise LlmInputError(f"--save {save_dir!r}: a file is there; give a folder (the checkpoint goes inside it)")


def _check_weight_format(recipe_name: str, fmt: str) -> None:
    """LlmInputError when checkpoint format ``fmt`` cannot hold the weights of recipe ``recipe_name``."""
    from ..export import CheckpointError
    from ..export.checkpoints.save_load import check_weight_format
    from ..nn import QuantLinear, recipe
    from ..packing import pack

    probe = QuantLinear(64, 64, bias=False, weight_quant=recipe(recipe_name).weight_quant)
    try:
        check_weight_format(fmt, pack(probe.group_quantized_weight()), f"--recipe {recipe_name}")
    except CheckpointError as err:
        raise LlmInputError(f"--format {fmt} cannot hold the weights of {err}; choose --format safetensors (any "
                            "format) or a recipe with MXFP4 / NVFP4 weights") from None


_ROTATIONS = ("rotate", "learn_rotations")  # (learn_rotations needs rotate: both leave together)


def _check_rotation(options: Any) -> None:
    """LlmInputError when a method that will run is ``rotate`` and the format's readers do not apply it."""
    if options.methods is None or options.save_format not in _FOREIGN_READERS:
        return
    from ..calib.methods import resolve_methods

    names = resolve_methods(list(options.methods) or None, options.recipe)
    if "rotate" in names:
        readers = _FOREIGN_READERS[options.save_format]
        raise LlmInputError(f"--methods {options.method_label} runs 'rotate' ({', '.join(names)}), whose online "
                            f"rotation --format {options.save_format} cannot hold ({readers} do not apply it); "
                            "choose --methods without rotate (e.g. "
                            f"{','.join(n for n in names if n not in _ROTATIONS) or 'scale_search,gptq'}) or --format "
                            "safetensors")


def check_save_options(options: Any) -> None:
    """The checks of the module docstring on :class:`~groupquant.llm.LlmOptions` (nothing without ``save_dir``)."""
    if options.save_dir is None:
        return
    _check_save_dir(options.save_dir)
    if options.save_format != "safetensors":
        _check_weight_format(options.recipe, options.save_format)
    _check_rotation(options)
