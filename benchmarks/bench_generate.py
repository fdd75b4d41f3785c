"""Greedy decode speed and memory of SmolLM2-135M-Instruct: float32, bfloat16 and packed MXFP4 /
NVFP4 / MXFP8 weights, batch 1, in one run.

    PYTHONPATH=src python benchmarks/bench_generate.py [--new-tokens 32] [--threads 1 2] [--repeats 3]
        [--formats float32 bf16 mxfp4 nvfp4 mxfp8] [--profile float32 mxfp4] [--markdown table.md]

Each format lives in its own worker process (so that its peak resident memory is its own); the
parent sends them the same run in turn (formats interleaved, each repeat, each thread count), so
a noisy machine slows them alike. A packed format is ``quantize_model(recipe="<fmt>_weight_only",
functional=False)`` then ``pack_model``: every projection (q/k/v/o, gate/up/down) a PackedLinear,
the output head (tied to the embeddings) kept float32 by the LLM rule of ``quantize_model``;
``mxfp4_bf16`` is packed MXFP4 with the model then cast to bfloat16 (the embedding / head, norms
and activations in bfloat16; the packed layers take bfloat16 input); ``mxfp4_autocast`` the float32
packed MXFP4 model decoding under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (the packed
layers and torch's GEMMs take bfloat16 input; norms, residuals and the KV cache stay float32). ``mxfp4_functional`` (only when
named) leaves ``quantize_model``'s function mode on, as it is by default with a recipe: with a
weight-only recipe it quantizes nothing in a Llama model (attention's matmuls are between
activations) but intercepts every torch call of the forward.
Columns:

- decode tokens/s: ``(N - 1) / (t(N new tokens) - t(1 new token))`` of ``model.generate`` (greedy,
  KV cache), so the prompt's prefill is left out; the median over the repeats, and its ratio to
  float32 at the same thread count.
- weight MB: bytes of the model's parameters and buffers, each storage once (the tied embedding /
  head counted once), and the ratio to float32.
- peak RSS MB: the worker's peak resident memory while decoding (``VmHWM`` reset after the model
  is built, where Linux allows it; else the peak since the worker started, marked ``*``).

The threads are set with ``torch.set_num_threads`` inside the workers only. The header gives the
CPU model, its vector flags and whether float32 subnormals flush to zero on this host.
SmolLM2's weights were stored as Q4_1 in the GGUF file, so they already lie on a 4-bit grid: the
decoded text of the packed formats is close to float's for that reason too.

``--profile FMT ...`` profiles one decode step of those formats (torch.profiler, 1 thread, each
three times interleaved, the fastest kept): the step's op time, the ops that take it, and how many
packed-GEMM calls one token makes.
"""
from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FORMATS = ["float32", "bf16", "mxfp4", "nvfp4", "mxfp8", "mxfp4_bf16", "mxfp4_autocast"]
#: formats run only when named: mxfp4 with quantize_model's function mode left on (its default with a recipe)
EXTRA_FORMATS = ["mxfp4_functional"]
PACKED_RECIPES = {"mxfp4": "mxfp4_weight_only", "nvfp4": "nvfp4_weight_only", "mxfp8": "mxfp8_weight_only",
                  "mxfp4_bf16": "mxfp4_weight_only", "mxfp4_functional": "mxfp4_weight_only",
                  "mxfp4_autocast": "mxfp4_weight_only"}
PROMPT = "The history of the printing press begins"


# ---- host facts ---------------------------------------------------------------------------------

def cpu_description() -> str:
    """CPU model name and the vector flags that matter to the kernels (from /proc/cpuinfo)."""
    model, flags = platform.processor() or "unknown", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model in ("unknown", "", "x86_64"):
                    model = value.strip()
                if key.strip() == "flags":
                    flags = value.split()
                    break
    except OSError:
        pass
    wanted = [f for f in flags if f.startswith(("avx", "amx", "fma", "f16c"))]
    return f"{model}; flags: {' '.join(sorted(wanted)) or '(none found)'}; {os.cpu_count()} logical CPUs"


def flushes_denormals() -> bool:
    """Whether a float32 subnormal product comes out as zero in torch on this thread (FTZ/DAZ)."""
    tiny = torch.tensor([2.0 ** -126], dtype=torch.float32)
    return float((tiny * torch.tensor([0.5]))[0]) == 0.0


# ---- one worker per format ----------------------------------------------------------------------

def _rss_kb(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5); whether it worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of parameters and buffers, each storage counted once (tied weights once)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = (t.untyped_storage().data_ptr(), t.device.type)
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def build(fmt: str, folder: str) -> torch.nn.Module:
    """The model in format ``fmt`` from the float32 copy saved in ``folder``."""
    from transformers import AutoConfig, AutoModelForCausalLM
    import groupquant as gq
    saved = torch.load(os.path.join(folder, "float32.pt"), weights_only=True)
    config = AutoConfig.for_model(**saved["config"])
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(saved["state"], strict=False)  # the tied head is the embedding (tie_word_embeddings)
    model.tie_weights()
    model.eval()
    del saved
    if fmt == "float32":
        return model
    if fmt == "bf16":
        return model.to(torch.bfloat16)
    model = gq.quantize_model(model, recipe=PACKED_RECIPES[fmt], functional=fmt.endswith("_functional"),
                              quantize_head=False)
    gq.pack_model(model, progress=False)
    if fmt.endswith("_bf16"):  # the float rest (embedding / head, norms) and the activations in bfloat16
        model.to(torch.bfloat16)
    return model


def _decode_rate(model, ids, new_tokens: int, autocast: bool = False) -> tuple:
    """(decode tokens/s, generated ids) from timing N and 1 new tokens (prefill cancels out);
    ``autocast``: under bfloat16 CPU autocast."""
    kw = dict(do_sample=False, pad_token_id=model.config.eos_token_id, attention_mask=torch.ones_like(ids))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model.generate(ids, max_new_tokens=2, **kw)  # warm-up
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw)
        t1 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        t2 = time.perf_counter()
    return (new_tokens - 1) / max((t2 - t1) - (t1 - t0), 1e-9), out


def _profile(model, ids, autocast: bool = False) -> tuple:
    """One decode step under torch.profiler: (its total op time in ms, a text with the packed-GEMM
    calls of the step and the top ops by self CPU time); ``autocast`` as in :func:`_decode_rate`."""
    from torch.profiler import ProfilerActivity, profile
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = model(ids, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        mask = torch.ones(1, ids.shape[1] + 1, dtype=torch.long)
        model(nxt, past_key_values=out.past_key_values, attention_mask=mask, use_cache=True)  # warm-up
        past = model(ids, use_cache=True).past_key_values
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(nxt, past_key_values=past, attention_mask=mask, use_cache=True)
    events = prof.key_averages()
    calls = sum(e.count for e in events if e.key == "groupquant::packed_linear")
    total_ms = sum(e.self_cpu_time_total for e in events) / 1e3
    table = events.table(sort_by="self_cpu_time_total", row_limit=12)
    return total_ms, f"packed_linear calls in one decode step: {calls}\n{table}"


def worker(fmt: str, folder: str, conn) -> None:
    """Build ``fmt``, answer ("run", threads, new_tokens) / ("profile",) / ("stop",) on ``conn``."""
    from transformers import AutoTokenizer
    torch.set_num_threads(1)
    base_rss = _rss_kb("VmRSS")
    model = build(fmt, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    from groupquant.export import PackedLinear
    packed = sum(isinstance(m, PackedLinear) for m in model.modules())
    gc.collect()
    reset = _reset_peak_rss()
    info = dict(weight_bytes=weight_bytes(model), packed_layers=packed, base_rss_kb=base_rss, hwm_reset=reset,
                flush=flushes_denormals())
    conn.send(info)
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            break
        if msg[0] == "profile":
            torch.set_num_threads(1)
            conn.send(_profile(model, ids, autocast=fmt.endswith("_autocast")))
            continue
        _, threads, new_tokens = msg
        torch.set_num_threads(threads)
        rate, out = _decode_rate(model, ids, new_tokens, autocast=fmt.endswith("_autocast"))
        text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        conn.send(dict(rate=rate, peak_rss_kb=_rss_kb("VmHWM"), text=text))


# ---- the parent ---------------------------------------------------------------------------------

def save_float_copy(folder: str) -> None:
    """SmolLM2 (GGUF -> float32, ~30 s) saved in ``folder`` as a plain state dict and config (the
    GGUF-loaded model refuses ``save_pretrained``); workers load it in seconds."""
    from llm_models import load_smollm2
    model, tok = load_smollm2()
    config = {k: v for k, v in model.config.to_dict().items() if k != "quantization_config"}
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight" or not model.config.tie_word_embeddings}
    torch.save({"config": config, "state": state}, os.path.join(folder, "float32.pt"))
    tok.save_pretrained(folder)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--formats", nargs="+", default=FORMATS, choices=FORMATS + EXTRA_FORMATS)
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile", nargs="+", choices=FORMATS + EXTRA_FORMATS, default=[],
                   help="also profile one decode step of these formats (interleaved, 3 times, the fastest kept)")
    p.add_argument("--markdown", default=None, help="write the table to this file too")
    args = p.parse_args(argv)
    if args.new_tokens < 2:
        raise SystemExit("--new-tokens must be at least 2 (the decode rate needs two timings)")
    formats = list(dict.fromkeys(["float32"] + args.formats + args.profile))
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        print("loading SmolLM2-135M-Instruct (GGUF, weights stored as Q4_1) ...", flush=True)
        save_float_copy(folder)
        workers: Dict[str, tuple] = {}
        info: Dict[str, dict] = {}
        for fmt in formats:  # one at a time: building holds a float32 copy
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker, args=(fmt, folder, child), daemon=True)
            proc.start()
            info[fmt] = parent.recv()
            workers[fmt] = (proc, parent)
            print(f"  built {fmt}: {info[fmt]['weight_bytes'] / 1e6:.1f} MB of weights, "
                  f"{info[fmt]['packed_layers']} packed layers", flush=True)
        rates: Dict[tuple, List[float]] = {}
        peak: Dict[str, int] = {}
        texts: Dict[str, str] = {}
        for r in range(args.repeats):
            for threads in args.threads:
                for fmt in formats:
                    conn = workers[fmt][1]
                    conn.send(("run", threads, args.new_tokens))
                    res = conn.recv()
                    rates.setdefault((fmt, threads), []).append(res["rate"])
                    peak[fmt] = max(peak.get(fmt, 0), res["peak_rss_kb"] or 0)
                    texts.setdefault(fmt, res["text"])
            print(f"  repeat {r + 1}/{args.repeats} done", flush=True)
        profiles: Dict[str, tuple] = {}
        for _ in range(3 if args.profile else 0):
            for fmt in args.profile:
                conn = workers[fmt][1]
                conn.send(("profile",))
                got = conn.recv()
                if fmt not in profiles or got[0] < profiles[fmt][0]:
                    profiles[fmt] = got
        for proc, conn in workers.values():
            conn.send(("stop",))
            proc.join(timeout=30)
    lines = report(formats, args, info, rates, peak, texts)
    print("\n".join(lines))
    for fmt, (total_ms, text) in profiles.items():
        print(f"\nprofile of one decode step, {fmt}, 1 thread (fastest of 3): {total_ms:.1f} ms of op time\n{text}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


def report(formats, args, info, rates, peak, texts) -> List[str]:
    """The header and markdown table."""
    f32_bytes = info["float32"]["weight_bytes"]
    marked = "" if all(i["hwm_reset"] for i in info.values()) else " (*: peak since the worker started)"
    lines = [f"SmolLM2-135M-Instruct (weights stored as Q4_1 in its GGUF file), greedy decode, batch 1, "
             f"{args.new_tokens} new tokens, median of {args.repeats} interleaved repeats",
             f"CPU: {cpu_description()}",
             f"float32 subnormals flush to zero: {info['float32']['flush']}; torch {torch.__version__}; a worker's "
             f"resident memory before loading the model (torch, transformers): "
             f"{(info['float32']['base_rss_kb'] or 0) / 1024:.0f} MB",
             f"packed formats: quantize_model(recipe='<fmt>_weight_only', functional=False) + pack_model; output "
             f"head tied to the embeddings kept float32 (49152 x 576 = 113 MB, shared with the embedding)", "",
             "| format | threads | decode tok/s | x float32 | weight MB | x float32 | peak RSS MB" + marked + " |",
             "|---|---|---|---|---|---|---|"]
    for threads in args.threads:
        base = statistics.median(rates[("float32", threads)])
        for fmt in formats:
            rate = statistics.median(rates[(fmt, threads)])
            wb = info[fmt]["weight_bytes"]
            star = "" if info[fmt]["hwm_reset"] else "*"
            lines.append(f"| {fmt} | {threads} | {rate:.2f} | {rate / base:.2f} | {wb / 1e6:.1f} | "
                         f"{wb / f32_bytes:.2f} | {peak[fmt] / 1024:.0f}{star} |")
    lines.append("")
    lines += [f"- {fmt}: {texts[fmt]!r}" for fmt in formats]
    return lines


if __name__ == "__main__":
    main()
