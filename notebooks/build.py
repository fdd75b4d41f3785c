"""Build the notebooks from their sources, execute them, and write them with small, stable outputs.

Sources are plain Python in "percent" form (``notebooks/src/NAME.py``): ``# %%`` starts a code
cell, ``# %% [markdown]`` a markdown cell whose lines are comments (``# `` stripped). Usage::

    PYTHONPATH=src python notebooks/build.py            # every source -> notebooks/NAME.ipynb
    PYTHONPATH=src python notebooks/build.py 01_mx_formats

The kernel is the running interpreter (a ``python3`` kernelspec written to a temporary folder
that comes first on JUPYTER_PATH). Volatile metadata (timings, kernel versions) is dropped and
progress-bar streams are collapsed to their final line, so rebuilding gives small diffs.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import List

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
CELL_TIMEOUT_S = 300
MAX_IMAGE_BYTES = 60_000


def parse_percent(text: str) -> nbformat.NotebookNode:
    """A notebook from percent-format source (markdown cells' ``# `` prefixes removed)."""
    nb = nbformat.v4.new_notebook()
    kind, lines = None, []

    def flush() -> None:
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(re.sub(r"^# ?", "", ln) for ln in body.splitlines())
            nb.cells.append(nbformat.v4.new_markdown_cell(body))
        elif kind == "code" and body:
            nb.cells.append(nbformat.v4.new_code_cell(body))

    for line in text.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind is not None:
            lines.append(line)
    flush()
    return nb


def _collapse_carriage_returns(text: str) -> str:
    """Keep what a terminal would show: for each line, the part after its last carriage return."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def _merge_streams(outputs: List[nbformat.NotebookNode]) -> List[nbformat.NotebookNode]:
    """Join consecutive stream outputs of the same stream (a progress bar writes one per update)."""
    merged: List[nbformat.NotebookNode] = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (out.get("output_type") == "stream" and prev is not None and prev.get("output_type") == "stream"
                and prev.get("name") == out.get("name")):
            prev["text"] += out["text"]
        else:
            merged.append(out)
    return merged


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop volatile metadata; collapse progress-bar streams; check image sizes."""
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    for i, cell in enumerate(nb.cells):
        cell.metadata = {}
        cell.pop("id", None)
        if "outputs" in cell:
            cell.outputs = _merge_streams(cell.outputs)
        for out in cell.get("outputs", []):
            out.pop("metadata", None) if out.get("output_type") == "stream" else out.update(metadata={})
            if out.get("output_type") == "stream":
                out["text"] = _collapse_carriage_returns(out["text"])
            png = out.get("data", {}).get("image/png")
            if png and len(png) * 3 // 4 > MAX_IMAGE_BYTES:
                raise ValueError(f"cell {i}: a {len(png) * 3 // 4} byte PNG; lower the figure size or dpi")
    nb.nbformat_minor = 4  # no cell ids
    return nb


def kernel_path() -> str:
    """Write a ``python3`` kernelspec for this interpreter into a temporary folder; returns the folder
    to put first on JUPYTER_PATH."""
    from ipykernel.kernelspec import install

    root = tempfile.mkdtemp(prefix="groupquant-kernel-")
    install(kernel_name="python3", prefix=root)
    return os.path.join(root, "share", "jupyter")


def build(name: str) -> Path:
    """Execute ``src/NAME.py`` and write ``NAME.ipynb``; returns its path."""
    nb = parse_percent((SOURCES / f"{name}.py").read_text())
    start = time.perf_counter()
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    out = HERE / f"{name}.ipynb"
    nbformat.write(clean(nb), out)
    print(f"{out.name}: {time.perf_counter() - start:.1f} s, {out.stat().st_size // 1024} KiB")
    return out


def main(names: List[str]) -> int:
    os.environ["JUPYTER_PATH"] = os.pathsep.join([kernel_path(), os.environ.get("JUPYTER_PATH", "")])
    src = str(HERE.parent / "src")
    os.environ["PYTHONPATH"] = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])
    for name in names or sorted(p.stem for p in SOURCES.glob("*.py")):
        build(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
