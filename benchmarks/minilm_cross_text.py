"""all-MiniLM-L6-v2 calibrated on one kind of text and evaluated on another: mean cosine of the
sentence embeddings to float, per recipe, method and calibration set.

    PYTHONPATH=src python benchmarks/minilm_cross_text.py [--recipes mxfp4 mxfp4_weight_only]
        [--methods rtn default] [--calibrations words docs] [--percdamp 0.01 0.1] [--functional]
        [--qat-steps 150 --qat-lr 1e-4 3e-4]

Calibration sets: ``words`` (32 random-word sentences of 4-16 words in two padded batches, as
``ptq_llm.py`` builds them: about 400 tokens) and ``docs`` (the first lines of 256 Python
standard-library docstrings in eight batches of 32). Evaluation sets: ``words`` (64 other random-word
sentences) and ``prose`` (64 sentences of the Python language reference's prose, ``pydoc_data``).
A figure that holds only where calibration and evaluation text look alike shows as a gap between the
two evaluation columns. ``--percdamp`` runs GPTQ with each damping (a fraction of ``mean(diag(H))``);
without it, ``ptq``'s default. Attention matmuls stay float unless ``--functional`` (as ``ptq_llm.py``).

``--qat-steps N``: each ``ptq`` result (not round to nearest) is also trained by ``groupquant.qat``
for ``N`` steps per ``--qat-lr`` (a row each): distillation of the float model's hidden states
(``Distillation(kl_weight=0, hidden_weight=1)``: an encoder has no logits), dropout off, on the
sentences of every standard-library docstring (about 2,400 sentences of 20-300 characters, sorted by
length into batches of 32 to waste little on padding); the seconds of a qat row are its own.
"""
from __future__ import annotations

import argparse
import copy
import os
import re
import sys
import time
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import groupquant as gq  # noqa: E402
from groupquant.calib.qat import Distillation  # noqa: E402
from groupquant.eval import python_docstrings  # noqa: E402
from llm_models import embed, load_minilm, sentences  # noqa: E402

_NOT_PROSE = set("{}()[]=*:")


def prose_sentences(n: int, skip: int = 500) -> List[str]:
    """``n`` plain English sentences (30-200 characters, no code punctuation) of the Python language
    reference (``pydoc_data.topics``), after the first ``skip`` such sentences."""
    from pydoc_data.topics import topics
    text = " ".join(topics[k] for k in sorted(topics))
    found = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text)]
    found = [s for s in found if 30 <= len(s) <= 200 and s[0].isupper() and not (_NOT_PROSE & set(s))]
    return found[skip:skip + n]


def docstring_lines(n: int) -> List[str]:
    """The first line of the first ``n`` non-empty standard-library docstrings."""
    lines = [d.strip().splitlines()[0].strip() for d in python_docstrings() if d.strip()]
    return [line for line in lines if line][:n]


def docstring_sentences(max_chars: int = 300) -> List[str]:
    """The sentences (and paragraphs without a full stop) of every standard-library docstring, 20 to
    ``max_chars`` characters, sorted by length."""
    parts = [t.strip() for d in python_docstrings() for t in re.split(r"(?<=[.!?])\s+|\n\s*\n", d)]
    return sorted([t for t in parts if 20 <= len(t) <= max_chars], key=len)


def methods_of(method: str, percdamp: Optional[float]):
    """``ptq``'s ``methods`` argument for a benchmark method name (``rtn``, ``default`` or ``+``-joined steps)."""
    if method == "rtn":
        return []
    if method == "default" and percdamp is None:
        return None
    steps = (gq.calib.methods.resolve_methods(None, RECIPE["name"]) if method == "default"
             else {s: {} for s in method.split("+")})
    return {s: ({**opts, "percdamp": percdamp} if s == "gptq" and percdamp is not None else dict(opts))
            for s, opts in steps.items()}


RECIPE: Dict[str, str] = {"name": ""}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipes", nargs="+", default=["mxfp4", "mxfp4_weight_only"])
    p.add_argument("--methods", nargs="+", default=["rtn", "default"])
    p.add_argument("--calibrations", nargs="+", default=["words", "docs"], choices=["words", "docs"])
    p.add_argument("--percdamp", nargs="+", type=float, default=[None])
    p.add_argument("--functional", action="store_true")
    p.add_argument("--qat-steps", type=int, default=0, help="also train each ptq result this many steps (0: no)")
    p.add_argument("--qat-lr", nargs="+", type=float, default=[1e-4], help="qat's peak learning rates, a row each")
    args = p.parse_args()
    torch.manual_seed(0)
    model, tok = load_minilm()

    def encode(texts: List[str]) -> dict:
        return dict(tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=128))

    evaluations = {"words": encode(sentences(64)), "prose": encode(prose_sentences(64))}
    lines = docstring_lines(256)
    calibrations = {"words": [encode(sentences(16, seed=s)) for s in (1, 2)],
                    "docs": [encode(lines[i:i + 32]) for i in range(0, len(lines), 32)]}
    references = {k: embed(model, v) for k, v in evaluations.items()}
    training: List[dict] = []
    if args.qat_steps:
        texts = docstring_sentences()
        training = [encode(texts[i:i + 32]) for i in range(0, len(texts), 32)]

    def cosines(m: torch.nn.Module) -> Dict[str, float]:
        return {k: F.cosine_similarity(embed(m, v), references[k]).mean().item() for k, v in evaluations.items()}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; cosine to float on 64 sentences each")
    print("| recipe | method | percdamp | calibrated on | words | prose | seconds |\n|---|---|---:|---|---:|---:|---:|")
    for recipe in args.recipes:
        RECIPE["name"] = recipe
        for method in args.methods:
            for damp in (args.percdamp if method != "rtn" else [None]):
                for kind in (args.calibrations if method != "rtn" else args.calibrations[:1]):
                    t = time.perf_counter()
                    q = gq.ptq(copy.deepcopy(model), calibrations[kind], recipe=recipe,
                               methods=methods_of(method, damp), progress=False, functional=args.functional)
                    cos = cosines(q)
                    damping = 'default' if damp is None else damp
                    print(f"| `{recipe}` | {method} | {damping} | {kind if method != 'rtn' else '-'} | "
                          f"{cos['words']:.4f} | {cos['prose']:.4f} | {time.perf_counter() - t:.0f} |", flush=True)
                    for lr in (args.qat_lr if args.qat_steps and method != "rtn" else []):
                        t = time.perf_counter()
                        s = gq.qat(copy.deepcopy(q), training, teacher=model, steps=args.qat_steps, lr=lr,
                                   warmup_steps=min(10, args.qat_steps // 10),
                                   distill=Distillation(kl_weight=0.0, hidden_weight=1.0), progress=False)
                        cos = cosines(s)
                        print(f"| `{recipe}` | {method} + qat {args.qat_steps} steps, lr {lr:g} | {damping} | "
                              f"{kind} (qat: docstring sentences) | {cos['words']:.4f} | {cos['prose']:.4f} | "
                              f"{time.perf_counter() - t:.0f} |", flush=True)


if __name__ == "__main__":
    main()
