"""Tiny random transformers models of several architectures (hidden size 64, 1-2 layers) for the
calibration tests; each factory seeds torch and returns the model in eval mode."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

VOCAB = 96


def _common(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64)
    base.update(kw)
    return base


def _make(model_cls, config, seed: int, norms_away_from_default: bool = True):
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    if norms_away_from_default:  # norms away from their init, so that folding them matters
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name.lower():
                    p.uniform_(0.5, 1.5) if name.endswith("weight") else p.uniform_(-0.2, 0.2)
    return model


def llama(seed: int = 0, **kw):
    cfg = transformers.LlamaConfig(**_common(num_key_value_heads=2, **kw))
    return _make(transformers.LlamaForCausalLM, cfg, seed)


def gemma(seed: int = 0):
    cfg = transformers.GemmaConfig(**_common(num_key_value_heads=2, head_dim=16))
    return _make(transformers.GemmaForCausalLM, cfg, seed)


def gemma2(seed: int = 0):
    cfg = transformers.Gemma2Config(**_common(num_key_value_heads=2, head_dim=16))
    return _make(transformers.Gemma2ForCausalLM, cfg, seed)


def stablelm(seed: int = 0):
    cfg = transformers.StableLmConfig(**_common(num_key_value_heads=4))
    return _make(transformers.StableLmForCausalLM, cfg, seed)


def phi3(seed: int = 0):
    cfg = transformers.Phi3Config(**_common(num_key_value_heads=4, pad_token_id=0))
    return _make(transformers.Phi3ForCausalLM, cfg, seed)


def opt(seed: int = 0):
    cfg = transformers.OPTConfig(vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                                 num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=64)
    return _make(transformers.OPTForCausalLM, cfg, seed)


def gpt_neox(seed: int = 0):
    cfg = transformers.GPTNeoXConfig(**_common())
    return _make(transformers.GPTNeoXForCausalLM, cfg, seed)


def olmo2(seed: int = 0):
    cfg = transformers.Olmo2Config(**_common(num_key_value_heads=4))
    return _make(transformers.Olmo2ForCausalLM, cfg, seed)


def gpt2(seed: int = 0):
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    return _make(transformers.GPT2LMHeadModel, cfg, seed)


def t5(seed: int = 0):
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                                num_heads=4, decoder_start_token_id=0)
    return _make(transformers.T5ForConditionalGeneration, cfg, seed)


def bert(seed: int = 0):
    cfg = transformers.BertConfig(**_common())
    return _make(transformers.BertModel, cfg, seed)


def ids(batch: int = 2, seq: int = 12, seed: int = 1) -> torch.Tensor:
    """Token ids ``[batch, seq]`` below the tiny models' vocabulary."""
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))
