"""Export, one sub-package per job: packed inference, checkpoints, ONNX.

- :mod:`.inference`: :func:`pack_model` / :func:`unpack_model`: packed inference layers
  (:class:`PackedLinear`, the weight decoded inside the GEMM kernel) and the way back.
- :mod:`.checkpoints`: :func:`packed_state_dict` / :func:`load_packed_state_dict` /
  :func:`unpacked_state_dict` (torch only); :func:`save` / :func:`load` (``groupquant.save`` /
  ``groupquant.load``) over one table of formats (:mod:`.checkpoints.format_table`): safetensors
  (groupquant's packed layout), compressed-tensors (vLLM), GGUF (llama.cpp) and, read only, gpt-oss
  MXFP4 files; :func:`mxfp4_linear` reads gpt-oss MXFP4 ``*_blocks`` / ``*_scales`` tensors. The
  packages each format needs are imported on use.
- :mod:`.onnx`: :func:`export_onnx` needs the ``export`` extra (``pip install 'groupquant[export]'``:
  onnx, onnxruntime); it is loaded on first use, so this package imports without onnx.
- :mod:`.errors`: :class:`ExportBaseError`, the base of :class:`ExportError` (ONNX), :class:`PackError`
  and :class:`CheckpointError`.
"""
from __future__ import annotations

from typing import Any

from .checkpoints.save_load import CHECKPOINT_FORMATS, LoadedCheckpoint, load, save
from .errors import CheckpointError, ExportBaseError, ExportError, PackError
from .checkpoints.mxfp4 import mxfp4_blocks, mxfp4_linear, mxfp4_packed_tensor
from .inference.pack_model import pack_model, packed_layers, unpack_model
from .inference.packed_linear import PackedLinear
from .checkpoints.packed_state_dict import load_packed_state_dict, packed_state_dict, unpacked_state_dict

__all__ = ["ExportBaseError", "ExportError", "export_onnx", "load_packed_state_dict", "packed_state_dict",
           "unpacked_state_dict",
           "pack_model", "unpack_model", "packed_layers", "PackedLinear", "PackError", "mxfp4_linear",
           "mxfp4_packed_tensor", "mxfp4_blocks", "save", "load", "LoadedCheckpoint", "CheckpointError",
           "CHECKPOINT_FORMATS"]


def __getattr__(name: str) -> Any:
    """Load :func:`export_onnx` lazily, with a clear message where onnx is missing."""
    if name != "export_onnx":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from .onnx.model import export_onnx
    except ImportError as e:
        raise ImportError(f"groupquant.export.export_onnx needs onnx and onnxruntime ({e}); "
                          "install them with: pip install 'groupquant[export]'") from e
    return export_onnx
