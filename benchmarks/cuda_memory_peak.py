"""What is alive at the peak of a training step on the GPU: the allocations behind bench_cuda.py's
``peak MiB`` column, each with its size and the line of Python that made it.

Run by hand on a machine with a CUDA GPU (from the repository root):

    PYTHONPATH=src python benchmarks/cuda_memory_peak.py            # Linear(4096, 4096), batch 8192
    PYTHONPATH=src python benchmarks/cuda_memory_peak.py --features 1024 --batch 2048

For the layers of bench_cuda.py's training table (``nn.Linear``, ``QuantLinear`` with MXFP8 weight
and input, the recipe ``mxfp8``; eager, ``x`` held by the caller as there, and made in the step),
one step runs under the CUDA allocator's history (``torch.cuda.memory._record_memory_history``),
after a step that warms the caches. The history is replayed (:func:`replay`): every allocation
adds its size, every free takes it away, also the free of a tensor from before the step (last
step's gradients, freed by ``zero_grad``), so the running sum is what ``max_memory_allocated``
minus the memory allocated when the step began measures, and its largest value is the peak. The
tensors made in the step and alive at that moment are printed, largest first, with where they were
allocated (the innermost frame in groupquant or in this file, else the innermost). Nothing is
asserted; the figures explain the table's ratios.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

import torch


@dataclass(frozen=True)
class Live:
    """One allocation alive at the peak: bytes and where (``file:line in function``)."""

    size: int
    where: str


def where(frames: Iterable[dict]) -> str:
    """The frame of an allocation to show: the innermost in groupquant or in this file, else the
    innermost (``frames`` innermost first, as the allocator records them)."""
    frames = list(frames)
    for frame in frames:
        name = frame.get("filename", "")
        if "groupquant" in name or name.endswith("cuda_memory_peak.py"):
            return f"{name.split('src/')[-1]}:{frame.get('line')} in {frame.get('name')}"
    if frames:
        return f"{frames[0].get('filename')}:{frames[0].get('line')} in {frames[0].get('name')}"
    return "(no Python frame)"


def replay(trace: Iterable[dict]) -> Tuple[int, int, List[Live]]:
    """(peak bytes, bytes of tensors from before the trace freed in it, allocations alive at the
    peak) of an allocator trace (``_snapshot()['device_traces'][device]``): ``alloc`` adds its
    size, ``free_requested`` takes its size away (the allocator's allocated-bytes count moves at
    those two); other actions (segments, ``free_completed``) do not count."""
    live: Dict[int, Live] = {}
    current = peak = freed_before = 0
    at_peak: List[Live] = []
    for event in trace:
        action, size, addr = event.get("action"), int(event.get("size", 0)), event.get("addr")
        if action == "alloc":
            live[addr] = Live(size, where(event.get("frames", ())))
            current += size
            if current > peak:
                peak, at_peak = current, list(live.values())
        elif action == "free_requested":
            current -= size
            if live.pop(addr, None) is None:
                freed_before += size
    return peak, freed_before, sorted(at_peak, key=lambda a: -a.size)


def traced_step(step) -> List[dict]:
    """The allocator's trace of one call of ``step`` (after a warm-up call), on the current device."""
    step()
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=1_000_000, clear_history=True)
    try:
        step()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return snapshot["device_traces"][torch.cuda.current_device()]


def report(name: str, trace: List[dict], mib: float = 2.0 ** 20) -> None:
    """Print the peak of one step and what is alive at it."""
    peak, freed_before, alive = replay(trace)
    print(f"\n### {name}: peak {peak / mib:.0f} MiB above the step's start "
          f"({freed_before / mib:.0f} MiB of tensors from before the step freed in it)")
    for a in alive:
        if a.size >= mib:
            print(f"- {a.size / mib:8.1f} MiB  {a.where}")
    small = sum(a.size for a in alive if a.size < mib)
    print(f"- {small / mib:8.1f} MiB  in {sum(1 for a in alive if a.size < mib)} allocations under 1 MiB")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=4096, help="K of the Linear(K, K)")
    parser.add_argument("--batch", type=int, default=8192, help="tokens")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("cuda_memory_peak.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    from bench_cuda import train_models, train_step_fn  # (benchmarks/ on sys.path: run as a script)

    k, batch = args.features, args.batch
    torch.manual_seed(0)
    x = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
    grad = torch.randn(batch, k, device="cuda", dtype=torch.bfloat16)
    print(f"card: {torch.cuda.get_device_name(0)}, torch {torch.__version__}; bfloat16 Linear {k} -> {k}, "
          f"batch {batch}, forward + backward; x {x.numel() * 2 / 2 ** 20:.0f} MiB, W {k * k * 2 / 2 ** 20:.0f} MiB")
    for name, model in train_models(k).items():
        for fresh in (False, True):
            label = f"{name}, x {'made in the step' if fresh else 'held by the caller'}"
            report(label, traced_step(train_step_fn(model, x, grad, fresh_input=fresh)))


if __name__ == "__main__":
    main()
