"""What a GGUF file of a Llama model needs beyond its tensors: llama.cpp tensor names, the
architecture keys, and llama.cpp's row order of the query / key projections.

Facts from the ``gguf`` package (``gguf.constants``, ``gguf.tensor_mapping.TensorNameMap``,
``GGUFWriter.add_*``) and llama.cpp's ``convert_hf_to_gguf.py`` (``LlamaModel.permute``):

- names: ``TensorNameMap(MODEL_ARCH.LLAMA, n_blocks)`` maps Hugging Face names to llama.cpp's
  (``model.layers.0.self_attn.q_proj.weight`` -> ``blk.0.attn_q.weight``, ``lm_head.weight`` ->
  ``output.weight``, ...); a tied head is not written (llama.cpp uses ``token_embd`` for the output).
- keys: ``general.architecture = llama`` and ``llama.context_length``, ``embedding_length``,
  ``block_count``, ``feed_forward_length``, ``attention.head_count``, ``attention.head_count_kv``,
  ``rope.freq_base``, ``attention.layer_norm_rms_epsilon``, ``rope.dimension_count``, ``vocab_size``.
- rows of ``q_proj`` (``k_proj``) weights and biases are permuted per head from Hugging Face's
  rotary half-split order to llama.cpp's interleaved order: ``w.reshape(n_head, 2, d / 2, ...)
  .swapaxes(1, 2)``. A row permutation keeps each weight block (blocks run along the input dim),
  so packed rows move as they are.

Tokenizer metadata is not written (the model alone does not hold a tokenizer); llama.cpp's loader
needs it, the ``gguf`` package's reader does not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch

__all__ = ["LlamaGGUF", "llama_gguf", "row_permutation"]


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

    def write_keys(self, writer: Any) -> None:
        """The llama architecture keys of the config on a ``gguf.GGUFWriter``."""
        c = self.config
        hidden = int(c["hidden_size"])
        writer.add_context_length(int(c.get("max_position_embeddings", 2048)))
        writer.add_embedding_length(hidden)
        writer.add_block_count(self.n_blocks)
        writer.add_feed_forward_length(int(c["intermediate_size"]))
        writer.add_head_count(self.n_head)
        writer.add_head_count_kv(self.n_head_kv)
        writer.add_rope_freq_base(float(c.get("rope_theta") or (c.get("rope_parameters") or {}).get("rope_theta")
                                        or 10000.0))
        writer.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-6)))
        writer.add_rope_dimension_count(int(c.get("head_dim") or hidden // self.n_head))
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
