"""Post-training calibration on real models: perplexity ratio to float of SmolLM2-135M-Instruct per
recipe and method, and all-MiniLM-L6-v2's embedding cosine to float, in one run.

    PYTHONPATH=src python benchmarks/ptq_llm.py [--recipes mxfp4 nvfp4 ...] [--methods rtn default smooth+rotate ...]
        [--tokens 4096] [--calibration-tokens 16384] [--markdown table.md] [--no-minilm] [--no-smollm2]
        [--auto-budget 5.0 --auto-candidates mxfp4_weight_only mxfp8_weight_only] [--functional] [--prose]
        [--auto-budget 4.25 --auto-candidates mxfp4:mxfp4 mxfp4:mxfp8 --auto-activation-budgets 4.25 5.0]
        [--input-scale-rounding even] [--gptq-options asymmetric=true percdamp=0.1]

Text: Python standard-library docstrings (``groupquant.eval.python_docstrings``), split into
disjoint evaluation / calibration documents (``groupquant.eval.token_sets``); perplexity over
``--tokens / 512`` non-overlapping windows of 512 tokens (default 8 x 512). ``--prose`` also
evaluates on text of another kind than the calibration: the prose of Python's language reference
(``pydoc_data.topics``, as ``qat_llm.py``), the same number of tokens, in a second column. Every Linear except the
output head (tied to the embeddings, kept in float) is quantized; ``functional=False`` (the
attention GEMMs stay float, as in issue 19's baseline; ``--functional`` quantizes them too). SmolLM2's weights were stored as Q4_1, so
weight-only figures start from a 4-bit grid.

A method is ``default`` (``groupquant.ptq``'s default methods for the recipe), ``default+<step>``
(the default methods and that step, e.g. ``default+learn_rotations``) or ``+``-joined steps: ``rtn`` (round to nearest, nothing else), ``smooth``
(SmoothQuant, alpha searched), ``rotate`` (block Hadamard per layer, online rotation),
``rotate_fused`` (``rotate_model(fused_residual=True)``), and, once ``groupquant.ptq`` exists,
``gptq`` / ``scale_search``: a method without ``rotate_fused`` then runs through ``groupquant.ptq``.
A method may end in ``+correct_upstream`` (e.g. ``rtn+correct_upstream``, ``default+correct_upstream``):
the experimental error correction against the float model's outputs (docs/calibration-upstream.md)
after the other steps.
Columns: perplexity ratio to float, minutes of calibration, minutes of evaluation.

``--auto-budget`` also runs ``groupquant.calib.auto_precision`` over ``--auto-candidates`` (recipe
names, or ``weights:activations`` pairs such as ``mxfp4:mxfp8``: MXFP4 weights, MXFP8 inputs), once
per ``--auto-activation-budgets`` value (bits per activation element; none: no activation budget).
``--input-scale-rounding`` gives every recipe's input quantizer another power-of-two scale rule
(``groupquant.ScaleRounding``; docs/calibration.md: measured, not adopted). ``--gptq-options``
sets options of the ``gptq`` step of every ``ptq`` run (``asymmetric=true``: GPTAQ's target,
``groupquant.calib.asymmetric``).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import groupquant as gq  # noqa: E402
from groupquant.calib.rotate import rotate_model  # noqa: E402
from groupquant.calib.smooth import smooth_model  # noqa: E402
from groupquant.eval import perplexity, python_docstrings, token_sets  # noqa: E402
from llm_models import embed, load_minilm, load_smollm2, sentences  # noqa: E402
from qat_llm import prose_tokens  # noqa: E402

RECIPES = ["mxfp8", "nvfp4", "mxfp4", "mxfp4_weight_only", "nvfp4_weight_only"]
METHODS = ["rtn", "smooth", "rotate", "smooth+rotate", "rotate_fused", "smooth+rotate_fused"]
_DIRECT = {"rtn", "smooth", "rotate", "rotate_fused"}
SEQ_LEN = 512


FUNCTIONAL = {"on": False}  # --functional: attention's matmuls quantized by the recipe too
INPUT_ROUNDING: Dict[str, Optional[str]] = {"rule": None}  # --input-scale-rounding
GPTQ_OPTIONS: Dict[str, object] = {}  # --gptq-options


def gptq_options(given: List[str]) -> Dict[str, object]:
    """``--gptq-options`` (``name=value``: ``asymmetric=true``, ``percdamp=0.1``) as ptq's options."""
    out: Dict[str, object] = {}
    for item in given:
        key, _, value = item.partition("=")
        low = value.lower()
        out[key] = low == "true" if low in ("true", "false") else float(value) if "." in value else int(value)
    return out


def with_gptq_options(methods):
    """``methods`` (None: the recipe's default, or a list) with ``--gptq-options`` on its gptq step."""
    if not GPTQ_OPTIONS or methods is None or "gptq" not in methods:
        return methods
    return {m: (dict(GPTQ_OPTIONS) if m == "gptq" else {}) for m in methods}


def recipe_for(name: str):
    """The recipe ``name``, or with ``--input-scale-rounding`` a copy whose input quantizer takes that
    power-of-two scale rule (``even``, ``rceil``, ...) instead of its own (OCP's ``floor`` for MX)."""
    rule = INPUT_ROUNDING["rule"]
    r = gq.nn.recipe(name)
    if rule is None or r.input_quant is None:
        return name
    from groupquant.quantizers.settings import ScaleRounding
    quant = type(f"{r.input_quant.__name__}_{rule}", (r.input_quant,), {"scale_rounding": ScaleRounding(rule)})
    return r.replace(input_quant=quant)


def calibrate(model: torch.nn.Module, recipe: str, method: str, calibration: List,
              exclude: List[str]) -> torch.nn.Module:
    """A converted and calibrated copy of ``model``. A method ending in ``+correct_upstream`` runs
    :func:`groupquant.calib.correct_upstream` against ``model`` after the other steps (each layer
    keeps the best of its weight, round to nearest and the corrected fit on the float-output
    objective, so the step never makes a layer worse on it)."""
    steps = method.split("+")
    if steps[-1] == "correct_upstream":
        q = calibrate(model, recipe, "+".join(steps[:-1]) or "rtn", calibration, exclude)
        gq.calib.correct_upstream(q, model, calibration)
        return q
    functional = FUNCTIONAL["on"]
    ptq = getattr(gq, "ptq", None)
    if ptq is not None and "rotate_fused" not in steps:
        if steps[0] == "default":
            methods = None if len(steps) == 1 else list(gq.calib.methods.DEFAULT_METHODS[recipe]) + steps[1:]
        else:
            methods = [s for s in steps if s != "rtn"]
        if GPTQ_OPTIONS and methods is None:
            methods = list(gq.calib.methods.DEFAULT_METHODS[recipe])
        methods = with_gptq_options(methods)
        return ptq(copy.deepcopy(model), calibration, recipe=recipe_for(recipe), methods=methods, exclude=exclude,
                   progress=False, functional=functional)
    unknown = [s for s in steps if s not in _DIRECT]
    if unknown:
        raise SystemExit(f"method {method!r}: {unknown} need groupquant.ptq (not in this build) and cannot be "
                         "combined with rotate_fused here")
    q = gq.quantize_model(copy.deepcopy(model), recipe=recipe_for(recipe), functional=functional, exclude=exclude)
    if "smooth" in steps:
        smooth_model(q, calibration, progress=False)
    if "rotate" in steps or "rotate_fused" in steps:
        rotate_model(q, fused_residual="rotate_fused" in steps, exclude=exclude)
    return q


def auto_candidates(given: List[str]) -> List:
    """``--auto-candidates`` as auto_precision takes them: ``"w:a"`` is the pair ``("w", "a")``."""
    return [tuple(c.split(":")) if ":" in c else c for c in given]


def auto_precision_model(model: torch.nn.Module, calibration: List, candidates: List[str], budget: float,
                         methods: List[str], activation_budget: Optional[float] = None) -> torch.nn.Module:
    """A copy of ``model`` with formats chosen per layer by ``auto_precision`` under ``budget`` bits
    per weight (and ``activation_budget`` bits per activation element), then calibrated by
    ``methods`` (layer methods)."""
    q = copy.deepcopy(model)
    gq.calib.auto_precision(q, calibration, candidates=auto_candidates(candidates), budget_bits=budget,
                            activation_budget_bits=activation_budget, exclude=["lm_head"], methods=methods,
                            progress=False)
    return q


def smollm2_rows(recipes: List[str], methods: List[str], tokens: int, calibration_tokens: int,
                 auto: Optional[Dict] = None, prose: bool = False) -> List[Dict]:
    model, tok = load_smollm2()
    sets = token_sets(python_docstrings(), tok, seq_len=SEQ_LEN, evaluation_windows=tokens // SEQ_LEN,
                      calibration_windows=max(1, calibration_tokens // SEQ_LEN))
    calibration = sets.calibration_inputs()
    texts = {"docstrings": sets.evaluation}
    if prose:
        texts["prose"] = prose_tokens(tok, tokens // SEQ_LEN)
    t = time.perf_counter()
    floats = {name: perplexity(model, ids, seq_len=SEQ_LEN, progress=False) for name, ids in texts.items()}
    print(f"SmolLM2-135M-Instruct float perplexity {', '.join(f'{k} {v:.3f}' for k, v in floats.items())} "
          f"({tokens // SEQ_LEN} x {SEQ_LEN} tokens, {(time.perf_counter() - t) / 60:.1f} min)", flush=True)
    rows = []
    for recipe in recipes:
        for method in methods:
            t0 = time.perf_counter()
            q = calibrate(model, recipe, method, calibration, ["lm_head"])
            t1 = time.perf_counter()
            r = {name: perplexity(q, ids, seq_len=SEQ_LEN, progress=False) / floats[name] for name, ids in texts.items()}
            t2 = time.perf_counter()
            row = dict(model="SmolLM2-135M", recipe=recipe, method=method, value=r["docstrings"],
                       prose=r.get("prose"), calib_min=(t1 - t0) / 60, eval_min=(t2 - t1) / 60)
            other = f"  prose {r['prose']:7.3f}" if prose else ""
            print(f"{recipe:<20} {method:<22} ppl ratio {r['docstrings']:7.3f}{other}  calib {row['calib_min']:5.1f} min"
                  f"  eval {row['eval_min']:5.1f} min", flush=True)
            rows.append(row)
            del q
    for act_budget in (auto.get("activation_budgets") or [None]) if auto else []:
        t0 = time.perf_counter()
        q = auto_precision_model(model, calibration, auto["candidates"], auto["budget"], auto["methods"], act_budget)
        t1 = time.perf_counter()
        r = {name: perplexity(q, ids, seq_len=SEQ_LEN, progress=False) / floats[name] for name, ids in texts.items()}
        label = f"auto_precision {auto['budget']} bits of {'/'.join(auto['candidates'])}"
        label += "" if act_budget is None else f", {act_budget} bits per activation"
        row = dict(model="SmolLM2-135M", recipe=label, method="+".join(auto["methods"]) or "rtn", value=r["docstrings"],
                   prose=r.get("prose"), calib_min=(t1 - t0) / 60, eval_min=(time.perf_counter() - t1) / 60)
        other = f"  prose {r['prose']:7.3f}" if prose else ""
        print(f"{label} ({q.precision_table.splitlines()[-1].strip()}): ppl ratio {r['docstrings']:7.3f}{other}  "
              f"calib {row['calib_min']:5.1f} min", flush=True)
        if act_budget is not None:
            counts = {}
            for chosen in q.precision_assignment.values():
                counts[chosen] = counts.get(chosen, 0) + 1
            wide = [n for n, c in q.precision_assignment.items() if c.endswith("a=mxfp8")]
            print(f"  layers per candidate {counts}; wider activations: {', '.join(wide)}", flush=True)
        rows.append(row)
        del q
    return rows


def minilm_rows(recipes: List[str], methods: List[str]) -> List[Dict]:
    model, tok = load_minilm()
    tokens = dict(tok(sentences(64), return_tensors="pt", padding=True))
    calibration = [dict(tok(sentences(16, seed=s), return_tensors="pt", padding=True)) for s in (1, 2)]
    reference = embed(model, tokens)
    rows = []
    for recipe in recipes:
        for method in methods:
            if "rotate_fused" in method:
                continue  # BERT-family: post-LayerNorm, refused (see groupquant.calib.graph)
            t0 = time.perf_counter()
            q = calibrate(model, recipe, method, calibration, [])
            t1 = time.perf_counter()
            cos = F.cosine_similarity(embed(q, tokens), reference).mean().item()
            row = dict(model="all-MiniLM-L6-v2", recipe=recipe, method=method, value=cos,
                       calib_min=(t1 - t0) / 60, eval_min=(time.perf_counter() - t1) / 60)
            print(f"MiniLM {recipe:<13} {method:<22} cosine {cos:.4f}  calib {row['calib_min']:5.2f} min", flush=True)
            rows.append(row)
    return rows


def markdown(rows: List[Dict]) -> str:
    lines = ["| model | recipe | method | result | calibration min | evaluation min |", "|---|---|---|---|---|---|"]
    for r in rows:
        what = f"{r['value']:.3f}x ppl" if r["model"].startswith("SmolLM2") else f"cosine {r['value']:.4f}"
        if r.get("prose") is not None:
            what += f" (prose {r['prose']:.3f}x)"
        lines.append(f"| {r['model']} | `{r['recipe']}` | {r['method']} | {what} | {r['calib_min']:.2f} | "
                     f"{r['eval_min']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="*", default=RECIPES)
    parser.add_argument("--methods", nargs="+", default=METHODS)
    parser.add_argument("--tokens", type=int, default=8 * SEQ_LEN, help="evaluation tokens (multiple of 512)")
    parser.add_argument("--calibration-tokens", type=int, default=32 * SEQ_LEN,
                        help="calibration tokens (default 32 x 512, the calibration set of issue 31)")
    parser.add_argument("--minilm-recipes", nargs="+", default=["mxfp4"])
    parser.add_argument("--no-minilm", action="store_true")
    parser.add_argument("--no-smollm2", action="store_true")
    parser.add_argument("--markdown", help="also write the table to this markdown file")
    parser.add_argument("--auto-budget", type=float, help="also run auto_precision at this many bits per weight")
    parser.add_argument("--auto-candidates", nargs="+", default=["nvfp4_weight_only", "mxfp8_weight_only"])
    parser.add_argument("--auto-methods", nargs="*", default=["scale_search", "gptq"])
    parser.add_argument("--auto-activation-budgets", nargs="+", type=float,
                        help="auto_precision's activation_budget_bits, one run per value (default: none)")
    parser.add_argument("--input-scale-rounding", choices=["floor", "ceil", "even", "rceil"],
                        help="every recipe's input quantizer with this power-of-two scale rule (MX: OCP's floor by default)")
    parser.add_argument("--gptq-options", nargs="+", default=[],
                        help="options of every ptq run's gptq step, name=value (asymmetric=true percdamp=0.1)")
    parser.add_argument("--prose", action="store_true",
                        help="also evaluate SmolLM2 on prose (Python's language reference), text unlike the calibration's")
    parser.add_argument("--functional", action="store_true",
                        help="also quantize the functional GEMMs (attention's matmuls) by the recipe")
    args = parser.parse_args(argv)
    FUNCTIONAL["on"] = args.functional
    INPUT_ROUNDING["rule"] = args.input_scale_rounding
    GPTQ_OPTIONS.update(gptq_options(args.gptq_options))
    if args.tokens < SEQ_LEN:
        parser.error(f"--tokens must be at least {SEQ_LEN} (one window)")
    rows = []
    if not args.no_smollm2:
        auto = None if args.auto_budget is None else dict(budget=args.auto_budget, candidates=args.auto_candidates,
                                                          methods=args.auto_methods,
                                                          activation_budgets=args.auto_activation_budgets)
        rows += smollm2_rows(args.recipes, args.methods, args.tokens, args.calibration_tokens, auto, args.prose)
    if not args.no_minilm:
        rows += minilm_rows(args.minilm_recipes, args.methods)
    table = markdown(rows)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
