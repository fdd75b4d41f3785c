"""Quantization-aware training on SmolLM2-135M-Instruct: round to nearest, ``groupquant.ptq`` and
``groupquant.qat`` side by side, perplexity ratio to float on two kinds of held-out text, with times.

    PYTHONPATH=src python benchmarks/qat_llm.py [--recipes mxfp4 nvfp4 ...] [--steps 100] [--seq-len 256]
        [--train-windows 64] [--calibration-tokens 16384] [--eval-windows 4] [--lr 2e-5 [2e-4 ...]] [--warmup 10]
        [--eval-every 20] [--patience 3] [--autocast bfloat16] [--markdown table.md] [--curve curve.csv]
        [--methods smooth+rotate+scale_search+gptq]

Text: Python standard-library docstrings (``groupquant.eval.python_docstrings``) split by
``groupquant.eval.token_sets`` into held-out documents (``--eval-windows`` windows of 512 tokens for
the table, then ``--val-windows`` more for qat's early stopping) and training documents after them
(``--train-windows`` windows of ``--seq-len`` tokens; ptq calibrates on the first
``--calibration-tokens`` of them; qat trains the ptq model on all of them, so its minutes include
ptq's). A second evaluation text of another kind: the prose of Python's language reference
(``pydoc_data.topics``), ``--eval-windows`` windows of 512 tokens. The output head stays float
(tied to the embeddings); as in ``ptq_llm.py``, attention's matmuls stay float unless
``--functional``. Columns: perplexity ratio to float on each text, minutes of
calibration / training, and qat's steps run and the step kept (early stopping on the validation
windows). ``--curve`` writes qat's history (step, loss, learning rate, validation perplexity).
Several ``--lr`` values train one qat model per peak learning rate from the same ptq model (a
learning-rate sweep: ptq runs once; each qat row's minutes are ptq's plus its own training), and
``--curve`` then writes one file per rate (``curve-lr0.0002.csv``). ``--methods`` gives ptq's methods
(``+``-joined, as ``ptq_llm.py``; default: the recipe's defaults).
"""
from __future__ import annotations

import argparse
import copy
import csv
import os
import sys
import time
from typing import Dict, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import groupquant as gq  # noqa: E402
from groupquant.calib.qat import Distillation  # noqa: E402
from groupquant.eval import perplexity, python_docstrings, token_sets  # noqa: E402
from llm_models import load_smollm2  # noqa: E402

EVAL_SEQ = 512


def prose_tokens(tok, windows: int) -> torch.Tensor:
    """``windows * 512`` token ids of the Python language reference's prose (``pydoc_data.topics``)."""
    from pydoc_data.topics import topics
    ids: List[int] = []
    for name in sorted(topics):
        ids += tok.encode("\n\n" + topics[name], add_special_tokens=False)
        if len(ids) >= windows * EVAL_SEQ:
            break
    return torch.tensor(ids[:windows * EVAL_SEQ], dtype=torch.long)


def ratios(model, texts: Dict[str, torch.Tensor], floats: Dict[str, float]) -> Dict[str, float]:
    """Perplexity ratio to float on each text."""
    return {name: perplexity(model, ids, seq_len=EVAL_SEQ, progress=False) / floats[name] for name, ids in texts.items()}


def row(recipe: str, method: str, r: Dict[str, float], minutes: float, extra: str = "") -> Dict:
    print(f"{recipe:<18} {method:<5} docstrings {r['docstrings']:6.3f}x  prose {r['prose']:6.3f}x  "
          f"{minutes:5.1f} min {extra}", flush=True)
    return dict(recipe=recipe, method=method, minutes=minutes, extra=extra, **r)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipes", nargs="+", default=["mxfp4"])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seq-len", type=int, default=256, help="tokens per training window")
    p.add_argument("--train-windows", type=int, default=64)
    p.add_argument("--calibration-tokens", type=int, default=16384, help="ptq's calibration tokens (32 x 512)")
    p.add_argument("--eval-windows", type=int, default=4, help="windows of 512 tokens per evaluation text")
    p.add_argument("--val-windows", type=int, default=2, help="windows of 512 tokens for early stopping")
    p.add_argument("--lr", type=float, nargs="+", default=[2e-5], help="peak learning rate(s): one qat run each")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--patience", type=int, default=3)
    p.add_argument("--grad-accumulation", type=int, default=1)
    p.add_argument("--autocast", default=None)
    p.add_argument("--functional", action="store_true",
                   help="also quantize the functional GEMMs (attention's matmuls), as ptq_llm.py --functional")
    p.add_argument("--progress", action="store_true", help="qat's progress bar")
    p.add_argument("--methods", default="default", help="ptq's methods, '+'-joined (default: the recipe's)")
    p.add_argument("--hidden-weight", type=float, default=0.0,
                   help="weight of the hidden-state term beside the KL on the logits (Distillation.hidden_weight)")
    p.add_argument("--markdown")
    p.add_argument("--curve", help="write qat's history (the last recipe's) to this CSV file (one per --lr)")
    args = p.parse_args(argv)

    model, tok = load_smollm2()
    sets = token_sets(python_docstrings(), tok, seq_len=EVAL_SEQ, evaluation_windows=args.eval_windows + args.val_windows,
                      calibration_windows=max(1, args.train_windows * args.seq_len // EVAL_SEQ,
                                              args.calibration_tokens // EVAL_SEQ))
    held_out = sets.evaluation[:args.eval_windows * EVAL_SEQ]
    validation = sets.evaluation[args.eval_windows * EVAL_SEQ:]
    train = sets.calibration.reshape(-1, args.seq_len)[:args.train_windows]
    train_items = [w[None] for w in train]
    calibration = [w[None] for w in sets.calibration.reshape(-1)[:args.calibration_tokens].reshape(-1, EVAL_SEQ)]
    texts = {"docstrings": held_out, "prose": prose_tokens(tok, args.eval_windows)}
    floats = {name: perplexity(model, ids, seq_len=EVAL_SEQ, progress=False) for name, ids in texts.items()}
    print(f"SmolLM2-135M float perplexity: docstrings {floats['docstrings']:.3f}, prose {floats['prose']:.3f} "
          f"({args.eval_windows} x {EVAL_SEQ} tokens each); qat: {len(train_items)} x {args.seq_len} training tokens, "
          f"{args.steps} steps, lr {' / '.join(map(str, args.lr))}; ptq: {args.calibration_tokens} calibration tokens", flush=True)
    functional = None if args.functional else False
    rows = []
    histories: Dict[float, list] = {}
    for recipe in args.recipes:
        t = time.perf_counter()
        rtn = gq.quantize_model(copy.deepcopy(model), recipe=recipe, quantize_head=False, functional=functional)
        rows.append(row(recipe, "rtn", ratios(rtn, texts, floats), (time.perf_counter() - t) / 60))
        del rtn
        t = time.perf_counter()
        methods = None if args.methods == "default" else args.methods.split("+")
        calibrated = gq.ptq(copy.deepcopy(model), calibration, recipe=recipe, quantize_head=False, progress=False,
                            functional=functional, methods=methods)
        ptq_minutes = (time.perf_counter() - t) / 60
        label = "" if methods is None else f" ({args.methods})"
        rows.append(row(recipe, "ptq" + label, ratios(calibrated, texts, floats), ptq_minutes))
        distill = Distillation(hidden_weight=args.hidden_weight)
        for lr in args.lr:
            t = time.perf_counter()  # qat trains the ptq model on (its minutes include ptq's)
            q = gq.qat(copy.deepcopy(calibrated) if len(args.lr) > 1 else calibrated, train_items, teacher=model,
                       steps=args.steps, lr=lr, warmup_steps=args.warmup, eval_data=validation,
                       eval_every=args.eval_every, eval_seq_len=EVAL_SEQ, patience=args.patience, distill=distill,
                       grad_accumulation=args.grad_accumulation, autocast=args.autocast, progress=args.progress)
            minutes = ptq_minutes + (time.perf_counter() - t) / 60
            histories[lr] = q.qat_history
            lr_note = f"lr {lr}, " if len(args.lr) > 1 else ""
            lr_note += f"hidden weight {args.hidden_weight}, " if args.hidden_weight else ""
            rows.append(row(recipe, "qat" + label, ratios(q, texts, floats), minutes,
                            f"({lr_note}{q.qat_history[-1].step} steps, kept step {q.qat_best_step})"))
            print(gq.train.format_history(q.qat_history), flush=True)
            del q
        del calibrated
    lines = ["| recipe | method | docstrings ppl / float | prose ppl / float | minutes | |", "|---|---|---:|---:|---:|---|"]
    lines += [f"| `{r['recipe']}` | {r['method']} | {r['docstrings']:.3f}x | {r['prose']:.3f}x | {r['minutes']:.1f} | "
              f"{r['extra']} |" for r in rows]
    table = "\n".join(lines) + "\n"
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    for lr, history in histories.items() if args.curve else ():
        path = args.curve
        if len(args.lr) > 1:
            stem, ext = os.path.splitext(args.curve)
            path = f"{stem}-lr{lr}{ext}"
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "loss", "lr", "validation_perplexity"])
            for r in history:
                w.writerow([r.step, r.loss, r.lr, r.perplexity])


if __name__ == "__main__":
    main()
