"""Where a transform can be folded: the norm -> linear and linear -> linear pairs of transformer
models from ``transformers``, found by their module structure (no import of transformers).

- Llama family (``LlamaForCausalLM``, SmolLM2, Mistral, Qwen2, ...: decoder layers with
  ``input_layernorm``, ``self_attn.{q,k,v,o}_proj``, ``post_attention_layernorm``,
  ``mlp.{gate,up,down}_proj``, RMSNorm with a ``weight``): each RMSNorm feeds the linears that
  read it (q/k/v, gate/up), ``v_proj`` feeds ``o_proj`` through the attention (linear in v per
  feature; with grouped-query attention every kv feature feeds ``n_rep`` query-head features of
  ``o_proj``), and ``up_proj`` feeds ``down_proj`` through ``act(gate) * up`` (linear in up).
- BERT family (``BertModel``, MiniLM: ``encoder.layer[i].attention.self.{query,key,value}``,
  ``attention.output.dense``, ``intermediate.dense``, ``output.dense``): ``value`` feeds
  ``attention.output.dense``. Its LayerNorms are post-norm: their output is also the residual
  stream, so a per-channel scale or a rotation cannot be folded into them exactly; they are not
  offered (see :func:`bert_norm_refusal`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import nn

__all__ = ["FoldGroup", "LlamaBlock", "bert_layers", "bert_norm_refusal", "fold_groups", "llama_blocks",
           "llama_mismatch", "module_names"]

Named = Tuple[str, nn.Module]


@dataclass(frozen=True)
class FoldGroup:
    """Linears that read the output of one ``source`` (a norm or a linear), which can absorb a
    per-feature scale of that output: ``kind`` is ``"norm"`` (scale the norm's weight) or
    ``"linear"`` (scale the source linear's output rows). ``feature_map`` (linear sources only):
    for each input feature of the targets, the source output feature it comes from (None: the same
    index; with grouped-query attention the kv feature a query-head feature repeats)."""

    source: Named
    targets: Tuple[Named, ...]
    kind: str
    feature_map: Optional[torch.Tensor] = None


@dataclass(frozen=True)
class LlamaBlock:
    """One Llama-family decoder layer's modules, with their model names."""

    input_norm: Named
    q: Named
    k: Named
    v: Named
    o: Named
    post_norm: Named
    gate: Named
    up: Named
    down: Named
    num_heads: int
    num_kv_heads: int
    head_dim: int


def module_names(model: nn.Module) -> dict:
    """``id(module) -> its first name`` in ``model``."""
    names: dict = {}
    for name, m in model.named_modules():
        names.setdefault(id(m), name)
    return names


def _decoder_layers(model: nn.Module) -> Optional[nn.ModuleList]:
    for path in ("model.layers", "layers"):
        try:
            layers = model.get_submodule(path)
        except AttributeError:
            continue
        if isinstance(layers, nn.ModuleList) and len(layers) and all(
                hasattr(layer, a) for layer in layers for a in ("input_layernorm", "self_attn", "mlp",
                                                                  "post_attention_layernorm")):
            return layers
    return None


_PARTS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
          "mlp.up_proj", "mlp.down_proj")


def llama_mismatch(model: nn.Module) -> str:
    """Why ``model`` is not read as a Llama-family model (empty when it is)."""
    layers = _decoder_layers(model)
    if layers is None:
        return (f"{type(model).__name__} has no decoder layers with input_layernorm, self_attn, mlp and "
                "post_attention_layernorm (model.layers)")
    for part in _PARTS:
        try:
            if not isinstance(layers[0].get_submodule(part), nn.Linear):
                raise AttributeError(part)
        except AttributeError:
            attn = getattr(layers[0], "self_attn", None)
            fused = [n for n in ("qkv_proj", "query_key_value", "c_attn", "Wqkv") if hasattr(attn, n)]
            return (f"{type(layers[0]).__name__} has no linear {part}" +
                    (f" (fused projections: self_attn.{fused[0]})" if fused else ""))
    return ""


def llama_blocks(model: nn.Module) -> List[LlamaBlock]:
    """The decoder layers of a Llama-family model (empty list for any other model, fused q/k/v or
    gate/up projections included: :func:`llama_mismatch` says why)."""
    layers = _decoder_layers(model)
    if layers is None or llama_mismatch(model):
        return []
    names = module_names(model)
    blocks = []
    config = getattr(model, "config", None)
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        parts = [layer.input_layernorm, attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj,
                 layer.post_attention_layernorm, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
        head_dim = int(getattr(attn, "head_dim", 0) or config.hidden_size // config.num_attention_heads)
        heads = attn.q_proj.out_features // head_dim
        kv_heads = attn.k_proj.out_features // head_dim
        blocks.append(LlamaBlock(*[(names[id(m)], m) for m in parts], num_heads=heads, num_kv_heads=kv_heads,
                                 head_dim=head_dim))
    return blocks


def bert_layers(model: nn.Module) -> List[nn.Module]:
    """The encoder layers of a BERT-family model (empty list for any other model)."""
    for path in ("encoder.layer", "bert.encoder.layer"):
        try:
            layers = model.get_submodule(path)
        except AttributeError:
            continue
        if isinstance(layers, nn.ModuleList) and all(hasattr(layer, "attention") and hasattr(layer, "intermediate")
                                                     for layer in layers):
            return list(layers)
    return []


def bert_norm_refusal() -> str:
    """Why a BERT-family LayerNorm takes no folded scale or rotation."""
    return ("BERT-family models are post-LayerNorm: each LayerNorm's output is the residual stream itself (it is "
            "added back after the next sublayer), so a per-feature scale or rotation folded into it would change the "
            "residual, and LayerNorm's mean subtraction and elementwise weight do not commute with a rotation")


def _gqa_map(block: LlamaBlock) -> Optional[torch.Tensor]:
    """For each o_proj input feature, the v_proj output feature it repeats (None without grouped-query)."""
    if block.num_kv_heads == block.num_heads:
        return None
    n_rep = block.num_heads // block.num_kv_heads
    head = torch.arange(block.num_heads) // n_rep
    return (head[:, None] * block.head_dim + torch.arange(block.head_dim)[None, :]).reshape(-1)


def fold_groups(model: nn.Module) -> List[FoldGroup]:
    """Every place a per-feature scale can be folded exactly, in model order (see the module doc)."""
    groups: List[FoldGroup] = []
    for b in llama_blocks(model):
        groups.append(FoldGroup(b.input_norm, (b.q, b.k, b.v), "norm"))
        groups.append(FoldGroup(b.v, (b.o,), "linear", _gqa_map(b)))
        groups.append(FoldGroup(b.post_norm, (b.gate, b.up), "norm"))
        groups.append(FoldGroup(b.up, (b.down,), "linear"))
    if groups:
        return groups
    names = module_names(model)
    for layer in bert_layers(model):
        value, out = layer.attention.self.value, layer.attention.output.dense
        groups.append(FoldGroup((names[id(value)], value), ((names[id(out)], out),), "linear"))
    return groups
