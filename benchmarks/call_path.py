"""How far a setting travels: the Python call paths from ``groupquant.ptq(recipe=...)`` to the native op.

Runs ``ptq`` with the default methods of one recipe on a tiny Llama (2 blocks, hidden 64) under
``sys.setprofile`` and records, every time a function of ``groupquant/ops/native_ops.py`` that
calls the C++ kernel of fake-quant / quantize (``torch.ops.groupquant.group_*``) is entered, the chain of
groupquant frames from ``ptq`` down to it. For each distinct chain (by file and function) it
counts the frames (calls) and the files; it prints the longest chain in full, the distribution,
and the number of groupquant source files in which any function ran during the call.

The measure is of the project's own code (no other tool): run it on two checkouts to compare
(``PYTHONPATH=<checkout>/src python benchmarks/call_path.py``). It uses only public names
(``groupquant.ptq``), so it runs on older checkouts too.

Usage: ``PYTHONPATH=src python benchmarks/call_path.py [--recipe mxfp4] [--show 1]``
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections import Counter
from typing import Dict, List, Tuple

import torch


#: the native ops whose callers end a chain: a function of native_ops.py that names one calls the kernel
KERNEL_OPS = {"group_fake_quant", "group_quantize", "group_dequantize"}


def tiny_llama() -> torch.nn.Module:
    """A 2-block Llama with random weights (hidden 64, vocabulary 128), seeded."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config).eval()


def trace_paths(recipe: str) -> Tuple[Counter, set, str]:
    """(distinct chains -> how many times entered, files in which any groupquant function ran, package root)."""
    import groupquant

    root = os.path.dirname(os.path.abspath(groupquant.__file__)) + os.sep
    target = os.path.join(root, "ops", "native_ops.py")
    model = tiny_llama()
    data = [torch.randint(0, 128, (1, 32), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    chains: Counter = Counter()
    ran: set = set()

    def profile(frame, event, arg):  # noqa: ANN001 - the sys.setprofile signature
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(root):
            return
        ran.add(path[len(root):])
        if path != target or not KERNEL_OPS & set(frame.f_code.co_names):
            return
        chain: List[str] = []
        f = frame
        while f is not None:
            p = f.f_code.co_filename
            if p.startswith(root):
                chain.append(f"{p[len(root):]}:{f.f_code.co_name}")
            f = f.f_back
        chain.reverse()
        starts = [i for i, c in enumerate(chain) if c.endswith(":ptq")]
        if starts:
            chains[tuple(chain[starts[0]:])] += 1

    sys.setprofile(profile)
    try:
        groupquant.ptq(model, data, recipe=recipe, progress=False)
    finally:
        sys.setprofile(None)
    return chains, ran, root


def files_of(chain: Tuple[str, ...]) -> List[str]:
    """The files of a chain in the order first entered."""
    seen: Dict[str, None] = {}
    for c in chain:
        seen.setdefault(c.split(":")[0], None)
    return list(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="mxfp4")
    parser.add_argument("--show", type=int, default=1, help="how many of the longest chains to print in full")
    args = parser.parse_args()
    chains, ran, root = trace_paths(args.recipe)
    if not chains:
        raise SystemExit("no call reached ops/native_ops.py from ptq (is the native extension built?)")
    frames = [len(c) for c in chains]
    files = [len(files_of(c)) for c in chains]
    print(f"groupquant at {root}; ptq(recipe={args.recipe!r}) on a tiny Llama, default methods")
    print(f"distinct call chains ptq -> ops/native_ops.py: {len(chains)}")
    print(f"calls (frames) per chain: min {min(frames)}, median {statistics.median(frames)}, max {max(frames)}")
    print(f"files per chain:          min {min(files)}, median {statistics.median(files)}, max {max(files)}")
    print(f"files in which a groupquant function ran during the call: {len(ran)}")
    for chain in sorted(chains, key=len, reverse=True)[:args.show]:
        print(f"\nlongest chain ({len(chain)} calls, {len(files_of(chain))} files):")
        for c in chain:
            print(f"  {c}")


if __name__ == "__main__":
    main()
