"""What a GGUF file of a Llama model needs beyond its tensors: llama.cpp tensor names, the
architecture keys, and llama.cpp's row order of the query / key projections.

Facts from the ``gguf`` package (``gguf.constants``, ``gguf.tensor_mapping.TensorNameMap``,
``GGUFWriter.add_*``) and llama.cpp's ``convert_hf_to_gguf.py`` (``LlamaModel.permute``):

- names: ``TensorNameMap(MODEL_ARCH.LLAMA, n_blocks)`` maps Hugging Face names to llama.cpp's
  (``model.layers.0.self_attn.q_proj.weight`` -> ``blk.0.attn_q.weight``, ``lm_head.weight`` ->
  ``output.weight``, ...); a tied head is not written (llama.cpp uses ``token_embd`` for the output).
- keys, as ``convert_hf_to_gguf.py`` writes them for a Llama (``TextModel.set_gguf_parameters``,
  ``LlamaModel.set_gguf_parameters``): ``general.architecture = llama``, ``general.type = model``,
  ``general.name`` (the config's ``_name_or_path`` folder name, where it has one),
  ``general.size_label`` (``gguf.size_label`` of the tensors' parameter count, written by
  :mod:`.gguf`) and
  ``llama.context_length``, ``embedding_length``, ``block_count``, ``feed_forward_length``,
  ``attention.head_count``, ``attention.head_count_kv``, ``rope.freq_base``,
  ``attention.layer_norm_rms_epsilon``, ``attention.key_length`` / ``value_length`` (where the
  config has ``head_dim``), ``rope.dimension_count``, ``vocab_size``; ``general.file_type`` and
  ``general.quantization_version`` are written for every GGUF file (:mod:`.gguf`).
- RoPE scaling (the config's ``rope_parameters``, or ``rope_scaling`` of older transformers):
  ``linear`` -> ``rope.scaling.type = linear`` and ``rope.scaling.factor``; ``yarn`` -> type
  ``yarn``, factor, ``rope.scaling.original_context_length`` and the YaRN factors the config gives;
  ``llama3`` (Llama 3.1 / 3.2) -> the F32 tensor ``rope_freqs.weight`` of per-frequency factors
  (1 for short wavelengths, ``factor`` for long ones, ``1 / ((1 - s) / factor + s)`` between, with
  ``s = (original_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)``),
  which llama.cpp divides the frequencies by; any other scaling (``dynamic``, ``longrope``, ...)
  raises :class:`CheckpointError` naming it, since llama.cpp's llama architecture would run
  unscaled RoPE.
- rows of ``q_proj`` (``k_proj``) weights and biases are permuted per head from Hugging Face's
  rotary half-split order to llama.cpp's interleaved order: ``w.reshape(n_head, 2, d / 2, ...)
  .swapaxes(1, 2)``. A row permutation keeps each weight block (blocks run along the input dim),
  so packed rows move as they are.

Tokenizer metadata is not written (the model alone does not hold a tokenizer); llama.cpp's loader
needs it, the ``gguf`` package's reader does not.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Dict, Optional

import torch

from .contents import rope_settings
from ..errors import CheckpointError

__all__ = ["LlamaGGUF", "llama_gguf", "row_permutation", "rope_parameters", "llama3_rope_factors"]

#: the GGUF tensor of llama3 RoPE frequency factors (``gguf.MODEL_TENSOR.ROPE_FREQS``)
ROPE_FREQS = "rope_freqs.weight"


def rope_parameters(config: Dict[str, Any]) -> Dict[str, Any]:
    """The config's RoPE settings (:func:`.contents.rope_settings`), ``rope_theta``
    10000 where the config gives none (transformers' Llama default)."""
    params = rope_settings(config)
    params.setdefault("rope_theta", 10000.0)
    params.setdefault("rope_type", "default")
    return params


def llama3_rope_factors(params: Dict[str, Any], head_dim: int) -> torch.Tensor:
    """float32 ``[head_dim / 2]``: the factor each RoPE frequency is divided by under Llama 3's
    scaling (module docstring; the wavelengths from the float32 frequencies ``theta ** (-2i / d)``)."""
    freqs = 1.0 / (float(params["rope_theta"]) ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    factor = float(params.get("factor", 8.0))
    low, high = float(params.get("low_freq_factor", 1.0)), float(params.get("high_freq_factor", 4.0))
    old_context = float(params.get("original_max_position_embeddings", 8192))
    out = []
    for freq in freqs.tolist():
        wavelength = 2 * math.pi / freq
        if wavelength < old_context / high:
            out.append(1.0)
        elif wavelength > old_context / low:
            out.append(factor)
        else:
            smooth = (old_context / wavelength - low) / (high - low)
            out.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32)


@dataclass(frozen=True)
class LlamaGGUF:
    """A Llama config resolved for GGUF: block count, heads, the config and gguf's tensor-name map."""

    n_blocks: int
    n_head: int
    n_head_kv: int
    config: Dict[str, Any]
    name_map: Any

    def tensor_name(self, key: str) -> Optional[str]:
        """llama.cpp's name of state-dict entry ``key`` (None where the map has none)."""
        return self.name_map.get_name(key, try_suffixes=(".weight", ".bias"))

    def heads_of(self, key: str) -> Optional[int]:
        """The head count whose rotary row order ``key`` (a q / k projection weight or bias) is permuted by, or None."""
        if key.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
            return self.n_head
        if key.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
            return self.n_head_kv
        return None

    @property
    def head_dim(self) -> int:
        """Features per attention head (the config's ``head_dim``, else hidden / heads)."""
        return int(self.config.get("head_dim") or int(self.config["hidden_size"]) // self.n_head)

    def extra_tensors(self) -> Dict[str, torch.Tensor]:
        """Tensors llama.cpp needs that the model's state does not hold (``rope_freqs.weight`` for
        llama3 RoPE, with a UserWarning: transformers' GGUF loader does not read it)."""
        params = rope_parameters(self.config)
        if str(params.get("rope_type", "default")).lower() == "llama3":
            warnings.warn("GGUF: Llama 3 RoPE scaling is written as llama.cpp's rope_freqs.weight; transformers' GGUF "
                          "loader does not read it and would run unscaled RoPE (load the file with llama.cpp or "
                          "groupquant.load, or use format='compressed-tensors' for transformers)", UserWarning,
                          stacklevel=5)
            return {ROPE_FREQS: llama3_rope_factors(params, self.head_dim)}
        return {}

    def _write_rope_scaling(self, writer: Any) -> None:
        """The ``rope.scaling.*`` keys (module docstring); CheckpointError for a scaling llama.cpp's llama lacks."""
        import gguf
        params = rope_parameters(self.config)
        kind = str(params.get("rope_type") or "default").lower()
        if kind in ("default", "llama3"):
            return  # llama3: the rope_freqs tensor
        if kind == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(float(params["factor"]))
            return
        if kind == "yarn":
            writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            writer.add_rope_scaling_factor(float(params["factor"]))
            writer.add_rope_scaling_orig_ctx_len(int(params["original_max_position_embeddings"]))
            for key, add in (("extrapolation_factor", writer.add_rope_scaling_yarn_ext_factor),
                             ("attention_factor", writer.add_rope_scaling_yarn_attn_factor),
                             ("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
                             ("beta_slow", writer.add_rope_scaling_yarn_beta_slow)):
                if params.get(key) is not None:
                    add(float(params[key]))
            return
        raise CheckpointError(f"GGUF: the config's RoPE scaling rope_type={kind!r} has no llama.cpp llama key (it "
                              "reads linear, yarn and llama3); llama.cpp would run unscaled RoPE. Save with "
                              "format='safetensors' or 'compressed-tensors'")

    def write_keys(self, writer: Any) -> None:
        """The llama architecture keys of the config on a ``gguf.GGUFWriter``."""
        c = self.config
        hidden = int(c["hidden_size"])
        writer.add_type("model")
        if c.get("_name_or_path"):
            writer.add_name(PurePath(str(c["_name_or_path"])).name)
        writer.add_context_length(int(c.get("max_position_embeddings", 2048)))
        writer.add_embedding_length(hidden)
        writer.add_block_count(self.n_blocks)
        writer.add_feed_forward_length(int(c["intermediate_size"]))
        writer.add_head_count(self.n_head)
        writer.add_head_count_kv(self.n_head_kv)
        writer.add_rope_freq_base(float(rope_parameters(c)["rope_theta"]))
        self._write_rope_scaling(writer)
        writer.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-6)))
        if c.get("head_dim") is not None:
            writer.add_key_length(int(c["head_dim"]))
            writer.add_value_length(int(c["head_dim"]))
        writer.add_rope_dimension_count(self.head_dim)
        writer.add_vocab_size(int(c["vocab_size"]))


def llama_gguf(config: Optional[Dict[str, Any]]) -> Optional[LlamaGGUF]:
    """The Llama GGUF conventions of a Hugging Face config dict with ``model_type == 'llama'``, else None."""
    if not config or config.get("model_type") != "llama":
        return None
    import gguf
    n_head, n_blocks = int(config["num_attention_heads"]), int(config["num_hidden_layers"])
    return LlamaGGUF(n_blocks, n_head, int(config.get("num_key_value_heads") or n_head), config,
                     gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_blocks))


def row_permutation(n_rows: int, n_head: int) -> torch.Tensor:
    """Row indices ``idx`` with ``llama_cpp_rows = hf_rows[idx]`` (per head, half-split to interleaved)."""
    if n_rows % (2 * n_head):
        raise ValueError(f"{n_rows} rows do not split into {n_head} heads of an even size")
    return torch.arange(n_rows).reshape(n_head, 2, n_rows // n_head // 2).transpose(1, 2).reshape(-1)
