"""NVFP4 scale searches on single SmolLM2-135M layers: the block objective and the layer's output
error of each grid alone and after GPTQ (``groupquant.calib.two_level_search`` vs ``scale_search``).

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/two_level_layers.py [--calibration-windows 2]

Each layer's H comes from ``nvfp4_weight_only`` round to nearest on ``--calibration-windows`` x 512
tokens of docstrings (as ``ptq_llm.py``'s calibration documents); errors are
``tr((W - Q) H (W - Q)^T) / out_features``, the unit of ptq's reports.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import groupquant as gq  # noqa: E402
from groupquant.calib.gptq import gptq_quantize  # noqa: E402
from groupquant.calib.hessian import HessianAccumulator, output_error  # noqa: E402
from groupquant.calib.scale_search import search_grid  # noqa: E402
from groupquant.calib.two_level_search import two_level_grid  # noqa: E402
from groupquant.calib.weight_grid import layer_fake_quant, rule_grid, settle  # noqa: E402
from groupquant.eval import python_docstrings, token_sets  # noqa: E402
from llm_models import load_smollm2  # noqa: E402

LAYERS = ["model.layers.2.self_attn.q_proj", "model.layers.2.self_attn.o_proj", "model.layers.2.mlp.down_proj",
          "model.layers.10.mlp.gate_proj"]
VARIANTS = {
    "two_level_search, largest pins, tensor factors 1 .. 1.5": {"tensor_factors": [1.0, 1.0625, 1.125, 1.25, 1.5]},
    "two_level_search, largest pins, tensor factor 1": {"tensor_factors": [1.0]},
    "two_level_search, cheapest pins, tensor factor 1, no 4-over-6": {"tensor_factors": [1.0], "pins": "cheapest",
                                                                       "four_over_six": False},
}


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calibration-windows", type=int, default=2)
    parser.add_argument("--layers", nargs="+", default=LAYERS)
    args = parser.parse_args(argv)
    model, tok = load_smollm2()
    sets = token_sets(python_docstrings(), tok, seq_len=512, evaluation_windows=1,
                      calibration_windows=args.calibration_windows)
    q = gq.quantize_model(model, recipe="nvfp4_weight_only", exclude=["lm_head"], functional=False)
    mods = dict(q.named_modules())
    accs = {n: HessianAccumulator(mods[n]).attach() for n in args.layers}
    with torch.no_grad():
        for item in sets.calibration_inputs():
            q(item) if torch.is_tensor(item) else q(**item)
    print("| layer | grid | tensor factor | 4-over-6 blocks | output error alone | after GPTQ |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.layers:
        accs[name].detach()
        h, layer = accs[name].hessian(), mods[name]
        w = layer.weight.detach().float()
        rule = rule_grid(layer)
        rows = [("round to nearest", rule, 1.0, 0.0), ("scale_search", search_grid(w, h, rule), 1.0, 0.0)]
        for label, opts in VARIANTS.items():
            res = two_level_grid(w, h, rule, **opts)
            rows.append((label, res.grid, res.tensor_factor, res.four_over_six))
        for label, grid, factor, fos in rows:
            alone = output_error(w, layer_fake_quant(layer, w) if label == "round to nearest"
                                 else settle(layer, grid.quantize(w)), h)
            swept = output_error(w, settle(layer, gptq_quantize(w, h, grid)), h)
            print(f"| {name.removeprefix('model.layers.')} | {label} | {factor:g} | {fos:.2%} | {alone:.3e} | "
                  f"{swept:.3e} |", flush=True)


if __name__ == "__main__":
    main()
