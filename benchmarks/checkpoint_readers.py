"""SmolLM2-135M-Instruct's checkpoints read back by each engine with its default settings:
perplexity (and, for llama.cpp, tokens per second) beside groupquant's own model.

    PYTHONPATH=src python benchmarks/checkpoint_readers.py [--recipes mxfp4_weight_only nvfp4_weight_only]
        [--tokens 2048] [--out DIR] [--markdown table.md]

For each recipe: ``quantize_model`` (round to nearest, output head tied to the embeddings and kept
in float), then ``groupquant.save`` in compressed-tensors and GGUF (tokenizer keys from SmolLM2's
own GGUF file), and each file loaded by:

- transformers, compressed-tensors folder: ``AutoModelForCausalLM.from_pretrained(folder)`` (no
  dtype: the config's, bfloat16; the compressed-tensors package decodes the weights);
- transformers, GGUF: ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)`` (float32);
- groupquant: ``groupquant.load(path, model)`` into a fresh float twin (float32);
- llama.cpp, GGUF: ``llama_cpp.Llama(model_path=path, logits_all=True)`` when llama-cpp-python is
  installed (``pip install llama-cpp-python``: it compiles llama.cpp, about 20 minutes on 2 cores);
  perplexity from its logits over the same windows, and greedy tokens per second of 64 new tokens.

Text: Python standard-library docstrings, ``--tokens / 512`` windows of 512 tokens, the windows
``groupquant.eval.perplexity`` uses. A reader that fails prints its error in the table.
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import tempfile
import time
import traceback
from typing import Callable, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import groupquant as gq  # noqa: E402
from groupquant.eval import perplexity, python_docstrings, token_sets  # noqa: E402
from groupquant.llm import load_smollm2, smollm2_gguf_path  # noqa: E402

SEQ_LEN = 512


def llama_cpp_perplexity(path: str, evaluation: torch.Tensor) -> Tuple[float, float]:
    """(perplexity over ``evaluation``'s windows, greedy tokens/s) of GGUF ``path`` in llama.cpp."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=path, n_ctx=SEQ_LEN, logits_all=True, verbose=False)
    total, count = 0.0, 0
    for window in evaluation.reshape(-1, SEQ_LEN).tolist():
        llm.reset()
        llm.eval(window)
        logits = torch.from_numpy(np.array(llm.scores[:SEQ_LEN], dtype=np.float32)).double()
        total += float(F.cross_entropy(logits[:-1], torch.tensor(window[1:]), reduction="sum"))
        count += SEQ_LEN - 1
    start = time.perf_counter()
    out = llm.create_completion("The capital of France is", max_tokens=64, temperature=0.0)
    seconds = time.perf_counter() - start
    return math.exp(total / count), out["usage"]["completion_tokens"] / seconds


def _measured(what: str, run: Callable[[], float]) -> str:
    """``run()`` formatted, or the first line of its error."""
    try:
        value = run()
    except Exception as e:  # a reader that cannot load or run the file: its error goes in the table
        traceback.print_exc(limit=2)
        return f"fails: {type(e).__name__}: {str(e).splitlines()[0][:90]}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=["mxfp4_weight_only", "nvfp4_weight_only"])
    parser.add_argument("--tokens", type=int, default=2048, help="evaluation tokens (windows of 512)")
    parser.add_argument("--out", default=None, help="folder for the checkpoints (default: a temporary one)")
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM
    import transformers

    model, tokenizer = load_smollm2()
    sets = token_sets(python_docstrings(), tokenizer, seq_len=SEQ_LEN, evaluation_windows=args.tokens // SEQ_LEN,
                      calibration_windows=0)
    ppl = lambda m: perplexity(m, sets.evaluation, seq_len=SEQ_LEN, progress=False)  # noqa: E731
    rows = [("float32", "-", "transformers (GGUF Q4_1 source)", f"{ppl(model):.3f}")]
    try:
        import llama_cpp
        llama_version = llama_cpp.__version__
    except ImportError:
        llama_version = None
    out = args.out or tempfile.mkdtemp(prefix="gq-readers-")
    for recipe in args.recipes:
        q = gq.quantize_model(copy.deepcopy(model), recipe=recipe, exclude=["lm_head"])
        rows.append((recipe, "-", "groupquant (fake-quant model)", f"{ppl(q):.3f}"))
        ct, gguf_file = os.path.join(out, f"{recipe}-ct"), f"{recipe}.gguf"
        gq.save(q, ct, format="compressed-tensors")
        gq.save(q, os.path.join(out, gguf_file), format="gguf", tokenizer_from=smollm2_gguf_path())
        rows.append((recipe, "compressed-tensors", "transformers from_pretrained(folder)",
                     _measured("ct", lambda: ppl(AutoModelForCausalLM.from_pretrained(ct).eval()))))
        rows.append((recipe, "compressed-tensors", "groupquant.load(folder, float twin)",
                     _measured("ct-gq", lambda: ppl(gq.load(ct, copy.deepcopy(model))))))
        rows.append((recipe, "gguf", "transformers from_pretrained(folder, gguf_file=...)",
                     _measured("gguf", lambda: ppl(AutoModelForCausalLM.from_pretrained(
                         out, gguf_file=gguf_file).eval()))))
        rows.append((recipe, "gguf", "groupquant.load(file, float twin)",
                     _measured("gguf-gq", lambda: ppl(gq.load(os.path.join(out, gguf_file), copy.deepcopy(model))))))
        if llama_version is not None:
            result = {}
            cell = _measured("llama.cpp", lambda: result.setdefault(
                "r", llama_cpp_perplexity(os.path.join(out, gguf_file), sets.evaluation))[0])
            speed = f" ({result['r'][1]:.0f} tokens/s)" if "r" in result else ""
            rows.append((recipe, "gguf", f"llama.cpp (llama-cpp-python {llama_version})", cell + speed))
        del q
    head = ("recipe", "file", "reader, default settings", f"perplexity ({sets.evaluation.numel()} tokens)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    versions = (f"transformers {transformers.__version__}, torch {torch.__version__}, llama-cpp-python "
                f"{llama_version or 'not installed'}")
    table = "\n".join(lines) + f"\n\n{versions}; command: PYTHONPATH=src python benchmarks/checkpoint_readers.py " \
                               f"--tokens {args.tokens} --recipes {' '.join(args.recipes)}"
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
