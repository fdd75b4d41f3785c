"""Checkpoints: ``groupquant.save`` / ``groupquant.load`` and the file formats they write and read.

- :mod:`.save_load`: :func:`save` / :func:`load`, one entry for every format;
- :mod:`.packed_state_dict`: the packed state dict every format holds (a model's weights in their storage bits);
- :mod:`.contents`: :class:`~.contents.CheckpointContents`, what each writer takes and each reader returns;
- :mod:`.fit`: the checks that a file fits the model it is loaded into;
- one module per format: :mod:`.safetensors` (groupquant's own), :mod:`.compressed_tensors`
  (+ :mod:`.compressed_tensors_layout`, vLLM), :mod:`.gguf` (+ :mod:`.gguf_blocks`, :mod:`.gguf_llama`,
  llama.cpp), :mod:`.mxfp4` (gpt-oss MXFP4 tensors);
- :mod:`.atomic_write`: write beside, then rename.
"""
from __future__ import annotations

from .packed_state_dict import load_packed_state_dict, packed_state_dict, unpacked_state_dict
from .save_load import CHECKPOINT_FORMATS, LoadedCheckpoint, load, save

__all__ = ["save", "load", "LoadedCheckpoint", "CHECKPOINT_FORMATS", "packed_state_dict",
           "load_packed_state_dict", "unpacked_state_dict"]
