"""Where ``groupquant.ptq``'s time goes on SmolLM2-135M-Instruct: wall and CPU seconds per phase,
per number of calibration tokens (issue 31: 16k tokens in under 10 minutes on a 2-core CPU, time
at most linear in the tokens).

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/ptq_profile.py --recipe mxfp4 --calibration-tokens 2048 4096
        [--methods default] [--cprofile out.prof] [--ppl]

Phases are timed by wrapping the functions ``ptq`` calls (inclusive times; a phase nested in another
is counted in both: ``feed`` holds ``hessian``). CPU time is ``time.process_time`` (every thread of
this process): on a machine loaded by other jobs wall time grows with the load while CPU time
estimates the wall time of an idle machine for a one-thread run (``OMP_NUM_THREADS=1``).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import sys
import time
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import groupquant as gq  # noqa: E402
import importlib  # noqa: E402

from groupquant.calib import blocks, hessian, methods, smooth  # noqa: E402
from groupquant.eval import perplexity, python_docstrings, token_sets  # noqa: E402
from llm_models import load_smollm2  # noqa: E402

ptq_module = importlib.import_module("groupquant.calib.ptq")  # (groupquant.calib.ptq is also the function)
SEQ_LEN = 512
TOTALS: Dict[str, List[float]] = defaultdict(lambda: [0.0, 0.0, 0])


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` adding its wall and CPU seconds and call count to ``TOTALS[name]``."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        w, c = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            t = TOTALS[name]
            t[0] += time.perf_counter() - w
            t[1] += time.process_time() - c
            t[2] += 1
    return wrapper


#: (module, attribute, phase name): the functions timed, patched where ptq's modules look them up.
PATCHES: List[Tuple[Any, str, str]] = [
    (ptq_module, "_plan_model_methods", "plan (float checks before converting)"),
    (ptq_module, "quantize_model", "quantize_model"),
    (smooth, "run_calibration", "smooth: record inputs"),
    (smooth, "_group_error", "smooth: alpha search (group errors)"),
    (smooth, "check_unchanged", "smooth: float check after"),
    (ptq_module, "capture_block_inputs", "capture first block inputs"),
    (ptq_module, "replay_is_faithful", "replay check"),
    (ptq_module, "_calibrate_unit", "calibrate unit (feed + layer methods)"),
    (hessian.HessianAccumulator, "_hook", "hessian hook (input quant + accumulate)"),
    (hessian.SharedInputs, "product", "hessian transform + product"),
    (hessian.HessianAccumulator, "add_product", "hessian sum"),
    (methods, "search_grid", "scale_search"),
    (methods, "gptq_quantize", "gptq"),
    (methods, "output_error", "output_error (layer checks)"),
    (ptq_module, "calibrate_layer", "layer methods (all)"),
]


def install_timers() -> None:
    for owner, attr, name in PATCHES:
        if hasattr(owner, attr):
            setattr(owner, attr, _timed(name, getattr(owner, attr)))
    run_block = blocks.run_block
    ptq_module.run_block = _timed("run_block (feed + next inputs)", run_block)
    for name in ("smooth_model", "rotate_model"):
        module = smooth if name == "smooth_model" else __import__("groupquant.calib.rotate", fromlist=["x"])
        setattr(module, name, _timed(name, getattr(module, name)))


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="mxfp4")
    parser.add_argument("--methods", default="default", help="default or +-joined method names")
    parser.add_argument("--calibration-tokens", type=int, nargs="+", default=[2048])
    parser.add_argument("--cprofile", help="write cProfile stats of the last run here")
    parser.add_argument("--ppl", action="store_true", help="also the perplexity ratio to float (8 x 512 tokens)")
    parser.add_argument("--blocks", type=int, help="keep only the first BLOCKS decoder layers (a quicker profile of "
                        "the per-block costs; the perplexity is then meaningless)")
    args = parser.parse_args(argv)
    install_timers()
    model, tok = load_smollm2()
    if args.blocks:
        model.model.layers = model.model.layers[:args.blocks]
        model.config.num_hidden_layers = args.blocks
    import copy
    base = None
    for n in args.calibration_tokens:
        sets = token_sets(python_docstrings(), tok, seq_len=SEQ_LEN, evaluation_windows=8,
                          calibration_windows=max(1, n // SEQ_LEN))
        calibration = sets.calibration_inputs()
        TOTALS.clear()
        chosen = None if args.methods == "default" else args.methods.split("+")
        q = copy.deepcopy(model)
        prof = cProfile.Profile(time.process_time) if args.cprofile else None  # CPU seconds
        w, c = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        gq.ptq(q, calibration, recipe=args.recipe, methods=chosen, exclude=["lm_head"], progress=False,
               functional=False)
        if prof:
            prof.disable()
            prof.dump_stats(args.cprofile)
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        print(f"\n{args.recipe} {args.methods} {len(calibration)} x {SEQ_LEN} tokens: wall {wall:.1f} s, "
              f"cpu {cpu:.1f} s (load average {os.getloadavg()[0]:.1f})")
        for name, (tw, tc, calls) in sorted(TOTALS.items(), key=lambda kv: -kv[1][1]):
            print(f"  {name:<44} wall {tw:8.1f} s  cpu {tc:8.1f} s  calls {calls}")
        if args.ppl:
            if base is None:
                base = perplexity(model, sets.evaluation, seq_len=SEQ_LEN, progress=False)
            ppl = perplexity(q, sets.evaluation, seq_len=SEQ_LEN, progress=False)
            print(f"  perplexity {ppl:.4f} (float {base:.4f}): ratio {ppl / base:.4f}")
        sys.stdout.flush()
        del q


if __name__ == "__main__":
    main()
