"""The fused residual rotation of a Llama-family model (``rotate_model(fused_residual=True)``).

QuaRot's construction (Ashkboos et al. 2024) with a block rotation: the residual stream ``x`` is
replaced by ``x Q``, ``Q = diag(s) blockdiag(H_b)`` (seeded random signs ``s``; ``b`` the group size
of the quantized readers), which RMSNorm commutes with once its weight is folded into the linears
that read it (``||x Q|| = ||x||``):

- each RMSNorm weight ``g`` -> ``W diag(g)`` of q/k/v (gate/up), ``g := 1``;
- embeddings ``E Q``; q/k/v/gate/up inputs ``W Q``; o/down outputs ``Q^T W`` (bias ``b Q``);
- ``v_proj`` outputs and ``o_proj`` inputs rotated per head by ``blockdiag(H_b)`` (the attention
  mixes tokens, not features, so this is exact and leaves ``o_proj`` no online rotation);
- ``down_proj`` keeps an online block rotation of its input (``act(gate) * up`` is not linear);
- head: ``W diag(g_final) Q`` with the final norm's weight folded; when the head is tied to the
  embeddings (one parameter, already ``E Q``) the final norm instead runs between two fast
  transforms (:class:`.rotated_norm.RotatedNorm`), so the weights stay tied.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

import torch
from torch import nn

from ..nn.layers.input_rotation import ROTATION_ATTR
from ..nn.layers.quant_layers import is_quant_layer
from .fold_check import check_groups, commutes_with_rotation
from .graph import LlamaBlock, bert_layers, bert_norm_refusal, fold_groups, llama_blocks, llama_mismatch
from .hadamard import rotate_weight_input, rotate_weight_output
from .layer_rotation import rotate_layer, rotation_block_size, write_weight
from .rotated_norm import RotatedNorm

__all__ = ["rotate_residual", "fused_refusal"]


def _set(module: nn.Module, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> None:
    """Copy new values into the module's own parameters (identity kept: tying, optimizers; the
    weight by :func:`write_weight`)."""
    write_weight(module, weight)
    with torch.no_grad():
        if bias is not None:
            module.bias.copy_(bias)


def _fold_norm(norm: nn.Module, readers: List[nn.Module], where: str) -> None:
    """``W := W diag(g)`` for each reader, then ``g := 1`` (RMSNorm: a weight and no bias)."""
    if getattr(norm, "bias", None) is not None or not isinstance(getattr(norm, "weight", None), torch.Tensor):
        raise ValueError(f"rotate_model(fused_residual=True): {where} is not an RMSNorm (a weight and no bias); "
                         "its mean subtraction / bias would not commute with the residual rotation")
    g = norm.weight.detach().double()
    for lin in readers:
        _set(lin, (lin.weight.detach().double() * g).to(lin.weight.dtype))
    with torch.no_grad():
        norm.weight.fill_(1.0)


def _block(blocks: List[LlamaBlock], hidden: int) -> int:
    """The residual rotation's block: the smallest group size among the quantized readers."""
    sizes = [rotation_block_size(m)[0] for blk in blocks for _, m in (blk.q, blk.k, blk.v, blk.gate, blk.up)
             if is_quant_layer(m)]
    sizes = [s for s in sizes if s is not None]
    if not sizes:
        raise ValueError("rotate_model(fused_residual=True): no q/k/v/gate/up projection has a group-wise quantizer; "
                         "convert the model first (quantize_model / ptq)")
    b = min(sizes)
    if hidden % b:
        raise ValueError(f"rotate_model(fused_residual=True): the block size {b} (the readers' group size) must "
                         f"divide hidden_size={hidden}")
    return b


def _online(layer: nn.Module, name: str, excluded: Set[str]) -> str:
    """Give ``layer`` its own online input rotation where it applies; what was done."""
    own = rotation_block_size(layer)[0] if is_quant_layer(layer) else None
    if name in excluded or own is None or getattr(layer, ROTATION_ATTR, None) is not None:
        return "input not rotated"
    rotate_layer(layer, own)
    return f"online input rotation b={own}"


def _final_norm(model: nn.Module):
    for path in ("model.norm", "norm"):
        try:
            return path, model.get_submodule(path)
        except AttributeError:
            continue
    raise ValueError("rotate_model(fused_residual=True): the model has no final norm (model.norm)")


def _structure_refusal(model: nn.Module) -> str:
    """Why the module structure rules the fused rotation out (empty when it does not)."""
    if llama_blocks(model):
        return ""
    if bert_layers(model):
        return (f"it does not apply to BERT-family models: {bert_norm_refusal()}; use fused_residual=False (per-layer "
                "rotations)")
    return ("it needs a Llama-family model from transformers (decoder layers with input_layernorm, "
            "self_attn.q/k/v/o_proj, post_attention_layernorm, mlp.gate/up/down_proj; here "
            f"{llama_mismatch(model)}); use fused_residual=False for per-layer rotations")


def fused_refusal(model: nn.Module, probe: Any) -> str:
    """Why the fused residual rotation would not be exact on ``model`` (empty when it would be),
    checked on the module structure, then by behaviour on ``probe`` (token ids): every norm's
    readers read its output, its output scales with its weight, and it commutes with a rotation
    once its weight is folded (RMSNorm; :mod:`.fold_check`)."""
    why = _structure_refusal(model)
    if why:
        return why
    groups = [g for g in fold_groups(model) if g.kind == "norm"]
    _, refused, _ = check_groups(model, groups, probe)
    if refused:
        return "; ".join(sorted(set(refused.values())))
    blocks = llama_blocks(model)
    hidden = model.get_input_embeddings().weight.shape[1]
    b = 2 if hidden % 2 == 0 else 1
    x = torch.randn(4, hidden, generator=torch.Generator().manual_seed(1)).to(model.get_input_embeddings().weight)
    norms = [blk.input_norm for blk in blocks] + [blk.post_norm for blk in blocks] + [_final_norm(model)]
    for name, norm in norms:
        if not isinstance(getattr(norm, "weight", None), torch.Tensor) or not commutes_with_rotation(norm, x, b):
            return (f"{name} ({type(norm).__name__}) does not commute with a rotation once its weight is folded "
                    "(RMSNorm does; mean subtraction does not)")
    return ""


def rotate_residual(model: nn.Module, *, seed: int, excluded: Set[str]) -> Dict[str, str]:
    """Apply the fused residual rotation in place; ``{linear name: what was done}``."""
    blocks = llama_blocks(model)
    if not blocks:
        raise ValueError(f"rotate_model(fused_residual=True): {_structure_refusal(model)}")
    embed = model.get_input_embeddings()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise ValueError("rotate_model(fused_residual=True) needs a model with an output head (e.g. "
                         "LlamaForCausalLM): a bare LlamaModel would return rotated hidden states")
    hidden = embed.weight.shape[1]
    b = _block(blocks, hidden)
    gen = torch.Generator().manual_seed(seed)
    signs = (torch.randint(0, 2, (hidden,), generator=gen) * 2 - 1).to(torch.float64)
    done: Dict[str, str] = {}
    tied = head.weight is embed.weight
    for blk in blocks:
        _fold_norm(blk.input_norm[1], [blk.q[1], blk.k[1], blk.v[1]], blk.input_norm[0])
        _fold_norm(blk.post_norm[1], [blk.gate[1], blk.up[1]], blk.post_norm[0])
        for name, lin in (blk.q, blk.k, blk.v, blk.gate, blk.up):
            _set(lin, rotate_weight_input(lin.weight, b, signs))
            done[name] = f"residual rotation b={b} (norm folded), offline"
        for name, lin in (blk.o, blk.down):
            _set(lin, *rotate_weight_output(lin.weight, lin.bias, b, signs))
        v, o = blk.v[1], blk.o[1]
        own = rotation_block_size(o)[0] if is_quant_layer(o) else None
        if own is not None and blk.head_dim % own == 0 and blk.o[0] not in excluded:
            _set(v, *rotate_weight_output(v.weight, v.bias, own))  # per-head Hadamard of v ...
            _set(o, rotate_weight_input(o.weight, own))             # ... undone by o_proj's input
            done[blk.v[0]] += f"; output rotated per head b={own}"
            done[blk.o[0]] = f"residual rotation b={b} of its output; input rotated per head b={own} with v_proj"
        else:  # a block wider than a head would mix heads: rotate o_proj's input online instead
            done[blk.o[0]] = f"residual rotation b={b} of its output; {_online(o, blk.o[0], excluded)}"
        done[blk.down[0]] = f"residual rotation b={b} of its output; {_online(blk.down[1], blk.down[0], excluded)}"
    norm_path, norm = _final_norm(model)
    head_name = next(n for n, m in model.named_modules() if m is head)
    _set(embed, rotate_weight_input(embed.weight, b, signs))  # also the head's weight when tied
    if tied:
        parent, _, attr = norm_path.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, RotatedNorm(norm, signs, b))
        done[head_name] = f"tied to the embeddings (E Q); final norm runs between fast transforms b={b}"
    else:
        _fold_norm(norm, [head], norm_path)
        _set(head, rotate_weight_input(head.weight, b, signs))
        done[head_name] = f"final norm folded, input rotated b={b}, offline"
    return done
