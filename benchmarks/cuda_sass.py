"""What nvcc makes of the fake-quant / quantize kernels, without a GPU: SASS instruction counts.

Compiles ``src/groupquant/csrc/group_quant_cuda.cu`` alone (it includes no torch header) for one
architecture with the extension's own CUDA flags (``-O3 --fmad=false``), disassembles it and prints,
for every kernel instantiation asked for, the registers a thread holds and the instructions of the
machine code: all of them, the branches, the loads and stores, and those of the path one lane takes
through one block of the common case (``path``: see below). A session without a GPU can compare two
versions of the kernels with it (``--save`` one table, ``--against`` it later); only a GPU says what
the figures cost in time (``benchmarks/bench_cuda.py``).

    make cuda-sass                     # the table for sm_90 (H100 / H200)
    .venv/bin/python benchmarks/cuda_sass.py --arch sm_90 --save /tmp/before.json
    .venv/bin/python benchmarks/cuda_sass.py --arch sm_90 --against /tmp/before.json

``path`` counts the instructions between the kernel's first load of a run of x and its first store
of a run of values, both included, in program order (the loads, the amax, the block scale and a
lane's first run). The ``fake quant`` and ``quantize`` columns count a lane's whole path through one
block, per element: the source is compiled again with the other calls' outputs compiled out and the
floor rule fixed (CALLS; ``values only`` is fake-quant without the mask), and the count runs from the first load of a run to the store of the
block's last run the lane holds (``runs``: of the last-dim kernel, runs along the row; of the
column kernel, rows), divided by the lane's elements. All are static counts (a branch not taken
still counts, both code encoders among them), a proxy for the dynamic count, which needs the card.
Compare a checkout of an earlier commit with ``--checkout`` (a ``git worktree``).

Needs nvcc (``CUDA_HOME`` or on PATH) and NVIDIA's cuobjdump + nvdisasm (``make cuda-sass-tools``
downloads their PyPI wheels into ``.tools/cuda``; or put them on PATH).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "groupquant" / "csrc" / "group_quant_cuda.cu"
TOOLS = ROOT / ".tools" / "cuda" / "nvidia" / "cu13" / "bin"
CUDA_FLAGS = ("-O3", "--fmad=false", "-Xcompiler", "-ffp-contract=off", "-std=c++17")

# (label, regex on the demangled kernel name, elements a run, runs of a block a lane holds, bytes
# of a run's input): the instantiations worth a row (rounding even; MX: a power-of-two scale, x *
# inv, blocks of 32; NVFP4: two-level, blocks of 16; saturation by the clamp, as every saturating
# format, unless the label says "selects"; the optional Clamp argument lets the patterns match a
# checkout from before it). The column kernels hold rows (8 of a block of 32), of 4 elements since
# 2026-12-07's third stop (before: 8 bfloat16 a run, the block's rows walked twice, no `per element`).
KERNELS = (
    ("rows bf16 x8 MX", r"rows_kernel<[^<>]*::BF16, 8, (false|0), 0(, (true|1))?>", 8, 4, 16),
    ("rows bf16 x8 MX selects", r"rows_kernel<[^<>]*::BF16, 8, (false|0), 0, (false|0)>", 8, 4, 16),
    ("rows bf16 x8 NVFP4", r"rows_kernel<[^<>]*::BF16, 8, (false|0), 2(, (true|1))?>", 8, 2, 16),
    ("rows f16 x8 MX", r"rows_kernel<[^<>]*::F16, 8, (false|0), 0(, (true|1))?>", 8, 4, 16),
    ("rows f32 x4 MX", r"rows_kernel<[^<>]*::F32, 4, (false|0), 0(, (true|1))?>", 4, 8, 16),
    ("columns bf16 x4 MX", r"columns_kernel<[^<>]*::BF16, 4, (false|0), 0(, (true|1))?>", 4, 8, 8),
    ("columns bf16 x8 MX (before)", r"columns_kernel<[^<>]*::BF16, 8, (false|0), 0(, (true|1))?>", 8, 0, 16),
    ("columns f32 x4 MX", r"columns_kernel<[^<>]*::F32, 4, (false|0), 0(, (true|1))?>", 4, 8, 16),
)

#: The SASS of a global load / store of 16, 8 or 4 bytes.
WIDE = {16: r"\.128", 8: r"\.64", 4: ""}

# The calls of the `per element` columns, each a rewrite of the source (each rewrite must apply):
# fake-quant (values and mask; the codes compiled out), fake-quant's values alone (no mask: the
# identity straight-through estimator's call) and quantize (uint8 codes; the values compiled out), both with the floor rule for power-of-two scales (OCP's), so that what
# lies between a lane's loads and its stores is the path the call takes; with the store that ends
# a run (a regex of the run's input bytes: the values' store, as wide as the input's load; the
# codes' store, of a byte an element).
FLOOR_RULE = ("return mode == kScaleFloor ?", "return true ?")
CALLS = {
    "fake quant": (lambda run_bytes, elements: rf"STG\.E{WIDE[run_bytes]}(?![.\w])",
                   (("if (job.codes == nullptr) return;", "return;"),
                    ("if (job.codes != nullptr && len < bs) {", "if (false) {"), FLOOR_RULE)),
    "values only": (lambda run_bytes, elements: rf"STG\.E{WIDE[run_bytes]}(?![.\w])",
                    (("if (job.codes == nullptr) return;", "return;"),
                     ("if (job.codes != nullptr && len < bs) {", "if (false) {"),
                     ("if (job.mask != nullptr) {  // the scaled input again", "if (false) {  //"), FLOOR_RULE)),
    "quantize": (lambda run_bytes, elements: rf"STG\.E{WIDE[elements]}(?![.\w])",
                 (("if (job.out != nullptr) {", "if (false) {"),
                  ("if (job.code_type == kCodeUInt8 || job.code_type == kCodeInt8) {", "if (true) {"),
                  FLOOR_RULE)),
}


def tool(name: str) -> str:
    """Path of a CUDA tool: on PATH, under CUDA_HOME/bin, or in .tools/cuda (make cuda-sass-tools)."""
    for place in (shutil.which(name), Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / name,
                  TOOLS / name):
        if place and Path(place).is_file():
            return str(place)
    sys.exit(f"{name} not found: `make cuda-sass-tools` downloads cuobjdump and nvdisasm into {TOOLS}")


def compile_object(arch: str, out: Path, source: Path = SOURCE, include: Path | None = None) -> None:
    """nvcc -c of a CUDA source (by default the extension's) for `arch` (e.g. sm_90) with the
    extension's flags; `include`: the folder of its headers (by default its own)."""
    subprocess.run([tool("nvcc"), "-c", f"-arch={arch}", *CUDA_FLAGS, f"-I{include or source.parent}", "-o",
                    str(out), str(source)], check=True)


def call_source(source: Path, folder: Path, rewrites: tuple) -> Path:
    """A copy of `source` in `folder` with `rewrites` ((old, new) texts) applied; each must match."""
    text = source.read_text()
    for old, new in rewrites:
        if old not in text:
            sys.exit(f"cuda_sass: the rewrite {old!r} no longer matches {source}: update CALLS")
        text = text.replace(old, new)
    copy = folder / source.name
    copy.write_text(text)
    return copy


def disassemble(obj: Path) -> dict[str, list[str]]:
    """{kernel name (mangled): [instruction text, ...]} from cuobjdump -sass."""
    env = dict(os.environ, PATH=f"{Path(tool('nvdisasm')).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    text = subprocess.run([tool("cuobjdump"), "-sass", str(obj)], check=True, capture_output=True, text=True,
                          env=env).stdout
    kernels: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.search(r"Function : (\S+)", line)
        if head:
            current = head.group(1)
            kernels[current] = []
            continue
        instr = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if instr and current is not None:
            kernels[current].append(instr.group(1))
    return kernels


def registers(obj: Path) -> dict[str, int]:
    """{kernel name (mangled): registers a thread} from cuobjdump -res-usage."""
    text = subprocess.run([tool("cuobjdump"), "-res-usage", str(obj)], check=True, capture_output=True,
                          text=True).stdout
    found, current = {}, None
    for line in text.splitlines():
        head = re.search(r"Function (\S+):", line)
        if head:
            current = head.group(1)
        regs = re.search(r"REG:(\d+)", line)
        if regs and current is not None:
            found[current] = int(regs.group(1))
    return found


def demangle(names: list[str]) -> dict[str, str]:
    """{mangled: demangled} through c++filt (the mangled name where c++filt is missing)."""
    filt = shutil.which("c++filt")
    if filt is None:
        return {n: n for n in names}
    out = subprocess.run([filt], input="\n".join(names), check=True, capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


def load_regex(run_bytes: int) -> str:
    """The SASS of a run's load of x (`run_bytes` wide)."""
    return rf"LDG\.E{WIDE[run_bytes]}(?![.\w])"


def path_count(code: list[str], run_bytes: int) -> int:
    """Instructions from the first load of a run of x through the first store of a run of values,
    both included (`run_bytes` wide)."""
    wide = WIDE[run_bytes]
    load = next((i for i, s in enumerate(code) if re.search(load_regex(run_bytes), s)), None)
    if load is None:
        return 0
    store = next((i for i, s in enumerate(code) if re.search(rf"STG\.E{wide}(?![.\w])", s) and i > load), None)
    return 0 if store is None else store - load + 1


def per_element(code: list[str], store: str, elements_a_run: int, block_runs: int, run_bytes: int) -> tuple[float, int]:
    """(instructions an element, runs a lane) of a kernel compiled for one call: its run stores
    (`store`, e.g. STG.E.128) are one a held run (in order) and one in the loop that reads runs
    again, so a lane's path through a block runs from the first load of a run (`run_bytes` wide)
    through the store of its last held run of the block (at most `block_runs`; the held runs a
    block leaves empty are skipped by a branch, the predicated loads of them aside)."""
    load = next((i for i, s in enumerate(code) if re.search(load_regex(run_bytes), s)), None)
    # a run's stores follow its first rounding (FRND); the block's scale stores come before it
    first = next((i for i, s in enumerate(code) if "FRND" in s and load is not None and i > load), None)
    stores = [i for i, s in enumerate(code) if re.search(rf"\b{store}", s) and first is not None and i > first]
    runs = min(len(stores) - 1, block_runs)
    if runs < 1:
        return 0.0, 0
    return round((stores[runs - 1] - load + 1) / (runs * elements_a_run), 1), runs


def summary(code: list[str], regs: int, run_bytes: int) -> dict[str, int]:
    """The figures of one kernel: registers, instructions, branches, memory instructions, path."""
    return {
        "registers": regs,
        "instructions": len(code),
        "branches": sum(1 for s in code if re.search(r"\bBRA\b", s)),
        "memory": sum(1 for s in code if re.search(r"\b(LDG|STG)\b", s)),
        "path": path_count(code, run_bytes),
    }


def kernels_of(arch: str, source: Path, include: Path) -> tuple[dict[str, list[str]], dict[str, int], dict[str, str]]:
    """(SASS, registers, demangled names) of every kernel of `source` (headers in `include`) for `arch`."""
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "group_quant_cuda.o"
        compile_object(arch, obj, source, include)
        kernels, regs = disassemble(obj), registers(obj)
    return kernels, regs, demangle(list(kernels))


def find(names: dict[str, str], kernels: dict, pattern: str) -> str | None:
    """The mangled name of the first kernel whose demangled name matches `pattern`."""
    return next((m for m, d in names.items() if re.search(pattern, d) and m in kernels), None)


def table(arch: str, source: Path = SOURCE) -> dict[str, dict[str, int]]:
    """{label: summary} for the kernels of KERNELS, compiled for `arch`; the last-dim rows also
    with `runs` and each call's `per element` (CALLS: a rewritten copy of the source each)."""
    kernels, regs, names = kernels_of(arch, source, source.parent)
    calls = {}
    for call, (store, rewrites) in CALLS.items():
        with tempfile.TemporaryDirectory() as tmp:
            calls[call] = (store, *kernels_of(arch, call_source(source, Path(tmp), rewrites), source.parent))
    rows = {}
    for label, pattern, elements, block_runs, run_bytes in KERNELS:
        match = find(names, kernels, pattern)
        if not match:
            continue
        rows[label] = summary(kernels[match], regs.get(match, 0), run_bytes)
        for call, (store, call_kernels, _, call_names) in calls.items():
            found = find(call_names, call_kernels, pattern)
            if found and block_runs:
                rows[label][call], rows[label][f"{call} runs"] = per_element(
                    call_kernels[found], store(run_bytes, elements), elements, block_runs, run_bytes)
    rows["(all kernels)"] = {"registers": max(regs.values(), default=0),
                             "instructions": sum(len(c) for c in kernels.values()),
                             "branches": 0, "memory": 0, "path": 0, "kernels": len(kernels)}
    return rows


def print_table(rows: dict, before: dict | None, arch: str) -> None:
    cols = ("registers", "instructions", "branches", "memory", "path",
            *(c for call in CALLS for c in (f"{call} runs", call)))
    print(f"SASS of {SOURCE.relative_to(ROOT)} for {arch} ({' '.join(CUDA_FLAGS)})")
    print("| kernel | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for label, row in rows.items():
        cells = []
        for c in cols:
            cell = str(row.get(c, ""))
            if before and label in before and before[label].get(c):
                cell += f" ({before[label][c]})"
            cells.append(cell)
        print(f"| {label} | " + " | ".join(cells) + " |")
    if before:
        print("(in brackets: the --against table)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90", help="nvcc -arch (sm_90: H100 / H200)")
    parser.add_argument("--save", type=Path, help="write the table as JSON here")
    parser.add_argument("--against", type=Path, help="a --save file to show beside the figures")
    parser.add_argument("--checkout", type=Path, default=ROOT,
                        help="the checkout whose kernels to count (e.g. a `git worktree` of an earlier commit)")
    args = parser.parse_args()
    rows = table(args.arch, args.checkout.resolve() / SOURCE.relative_to(ROOT))
    before = json.loads(args.against.read_text()) if args.against else None
    print_table(rows, before, args.arch)
    if args.save:
        args.save.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
