"""Bytes FSDP2's all-gather moves per training step: float32 against the MX all-gather
(groupquant.nn.enable_mx_all_gather), per recipe, for a small transformer-style MLP stack.

    PYTHONPATH=src python benchmarks/bench_allgather.py [--width 256] [--blocks 4] [--world 2] [--steps 5]

Spawns ``--world`` gloo processes on 127.0.0.1 (CPU). Each block (LayerNorm, Linear d -> 4d,
GELU, Linear 4d -> d, residual) is its own ``fully_shard`` unit, the root holds the head
(Linear d -> d, not resharded after forward). Bytes are what each rank hands to FSDP2's
all-gather collective (``dist.all_gather_single``) during one step (forward, backward), counted
by wrapping that call; both routes are checked to give the same loss bit for bit. Time per
step (median, the routes interleaved) is printed too: on gloo over loopback on a shared CPU it
is dominated by quantizing and decoding, not by the wire, so read the bytes, not the time.
"""
from __future__ import annotations

import argparse
import copy
import os
import socket
import statistics
import time
from typing import Dict, List

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.fsdp import fully_shard

from groupquant.nn import enable_mx_all_gather, quantize_model

RECIPES = ("mxfp8", "mxfp8_weight_only", "mxfp4", "mxfp4_weight_only", "nvfp4", "nvfp4_weight_only")
_GATHER = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"


class Block(nn.Module):
    """LayerNorm, Linear d -> 4d, GELU, Linear 4d -> d, residual."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class Counted:
    """Bytes this rank hands to the all-gather collective while active."""

    def __init__(self) -> None:
        self.bytes = 0
        self._orig = getattr(dist, _GATHER)

    def __enter__(self) -> "Counted":
        def counted(output_tensor, input_tensor, *args, **kwargs):
            self.bytes += input_tensor.numel() * input_tensor.element_size()
            return self._orig(output_tensor, input_tensor, *args, **kwargs)
        setattr(dist, _GATHER, counted)
        return self

    def __exit__(self, *exc) -> None:
        setattr(dist, _GATHER, self._orig)


def build(recipe: str, args: argparse.Namespace, mx: bool) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(args.width) for _ in range(args.blocks)], nn.Linear(args.width, args.width))
    quantize_model(model, recipe=recipe)
    model = copy.deepcopy(model)
    if mx:
        enable_mx_all_gather(model)
    for block in model[:-1]:
        fully_shard(block)
    fully_shard(model)
    return model


def step(model: nn.Module, x: torch.Tensor) -> tuple:
    """One forward + backward: (loss, bytes gathered, seconds)."""
    with Counted() as counter:
        start = time.perf_counter()
        loss = model(x).square().mean()
        loss.backward()
        seconds = time.perf_counter() - start
    model.zero_grad()
    return loss.detach(), counter.bytes, seconds


def worker(rank: int, args: argparse.Namespace, port: int, queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.world)
    rows: List[Dict[str, object]] = []
    x = torch.randn(args.tokens, args.width, generator=torch.Generator().manual_seed(rank))
    float_model = build(RECIPES[0], args, mx=False)  # float32 all-gather bytes do not depend on the recipe
    _, float_bytes, _ = step(float_model, x)
    for recipe in RECIPES:
        ref, mx = build(recipe, args, mx=False), build(recipe, args, mx=True)
        times = {"float32": [], "mx": []}
        same, nbytes = True, 0
        for _ in range(args.steps):
            loss_ref, _, t_ref = step(ref, x)
            loss_mx, nbytes, t_mx = step(mx, x)
            same &= torch.equal(loss_ref, loss_mx)
            times["float32"].append(t_ref)
            times["mx"].append(t_mx)
        rows.append({"recipe": recipe, "bytes": nbytes, "same": same,
                     "t_ref": statistics.median(times["float32"]), "t_mx": statistics.median(times["mx"])})
    if rank == 0:
        queue.put((float_bytes, rows))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(rank, args, port, queue)) for rank in range(args.world)]
    for p in procs:
        p.start()
    float_bytes, rows = queue.get(timeout=600)
    for p in procs:
        p.join()
    params = args.blocks * (8 * args.width ** 2 + 7 * args.width) + args.width ** 2 + args.width
    print(f"torch {torch.__version__}, gloo, world {args.world}, {args.blocks} blocks of width {args.width} "
          f"(+ head), {params / 1e6:.2f} M parameters, {args.tokens} tokens per rank")
    print(f"bytes each rank sends to FSDP2's all-gather per step (forward + backward); float32: {float_bytes:,}")
    print(f"{'recipe':20s} {'bytes/step':>12s} {'vs float32':>10s} {'same loss':>9s} "
          f"{'ms float32':>10s} {'ms mx':>8s}")
    for r in rows:
        print(f"{r['recipe']:20s} {r['bytes']:12,d} {r['bytes'] / float_bytes:10.3f} {str(r['same']):>9s} "
              f"{r['t_ref'] * 1e3:10.1f} {r['t_mx'] * 1e3:8.1f}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
