"""Running a function in 2 gloo processes on 127.0.0.1, bounded in time, for the distributed tests.

:func:`run_ranks` starts ``world`` processes (``torch.multiprocessing`` with the ``spawn`` start
method, a free port), each calling ``fn(rank, world, out_dir)`` after ``init_process_group("gloo")``,
and returns what each rank saved with ``torch.save`` to ``out_dir/rank{r}.pt``. A process that
fails or runs past ``timeout`` s fails the test (the others are killed). :func:`skip_reason` says
why the platform cannot run them (no ``torch.distributed``, no gloo), or None.
"""
from __future__ import annotations

import os
import socket
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.multiprocessing as mp


def skip_reason() -> Optional[str]:
    """Why 2-process tests cannot run here, or None."""
    if not torch.distributed.is_available():
        return "torch.distributed is not available in this build"
    if not torch.distributed.is_gloo_available():
        return "the gloo backend is not available in this build"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
    except OSError as err:
        return f"cannot open a local socket on 127.0.0.1: {err}"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn: Callable[..., Any], out_dir: str) -> None:
    """One rank: join the gloo group, run ``fn``, save its result (or the traceback)."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    path = os.path.join(out_dir, f"rank{rank}.pt")
    try:
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world,
                                             init_method=f"tcp://127.0.0.1:{port}")
        try:
            result = fn(rank, world)
            torch.distributed.barrier()  # both ranks done before either closes its gloo pairs (an abort at exit otherwise)
        finally:
            torch.distributed.destroy_process_group()
        torch.save({"ok": True, "result": result}, path)
    except BaseException:  # noqa: BLE001  (reported to the parent)
        torch.save({"ok": False, "error": traceback.format_exc()}, path)
        raise


def run_ranks(fn: Callable[[int, int], Any], out_dir: str, world: int = 2, timeout: float = 120.0) -> List[Any]:
    """``fn(rank, world)`` in ``world`` gloo processes; the list of their results (see module doc)."""
    ctx = mp.start_processes(_entry, args=(world, _free_port(), fn, out_dir), nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=max(deadline - time.monotonic(), 0.1)):
        if time.monotonic() < deadline:
            continue
        for process in ctx.processes:
            if process.is_alive():
                process.kill()
        raise TimeoutError(f"the {world} processes did not finish within {timeout} s")
    results: List[Dict[str, Any]] = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False)
                                     for r in range(world)]
    for r, res in enumerate(results):
        if not res["ok"]:
            raise AssertionError(f"rank {r} failed:\n{res['error']}")
    return [res["result"] for res in results]
