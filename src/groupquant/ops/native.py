"""The native (C++/CUDA) kernels: backend choice, just-in-time build and loading.

The extension in ``groupquant/csrc`` is compiled on first use with
``torch.utils.cpp_extension.load`` (ninja) into torch's extension cache, or into
``GROUPQUANT_BUILD_DIR`` when set, under a name keyed by the sources' contents and path (so
switching between checkouts never rebuilds); a build prints a line before it (what, where, how
long it usually takes) and one after it (the time it took). Where it cannot be built (no
compiler), the PyTorch reference runs instead, after one warning.

``GROUPQUANT_BACKEND`` chooses: unset or ``auto`` (the default: native when it builds, else the
reference with one warning), ``native`` (an error if the build fails) or ``reference`` (never
build, always the PyTorch reference). ``GROUPQUANT_CPU_PATH`` (:mod:`.native_cpu_path`)
forces the packed-GEMM kernels' instruction-set path, read once here, at load.

Build flags: the instruction set torch dispatches to (so the group ops fit this CPU); the
packed-GEMM kernels' AVX2 and AVX-512 paths carry their own target options in their own
translation units and are chosen at run time, so they do not depend on these flags.
"""
from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import torch

from .compile_constant import compile_constant
from .native_cpu_path import apply_requested, requested_cpu_path

__all__ = ["BackendSettingError", "BuildProgress", "backend", "native_available", "serves", "load", "extension_name", "needs_build",
           "build_message", "build_flags",
           "CSRC", "BACKEND_ENV", "BUILD_DIR_ENV"]

BACKEND_ENV = "GROUPQUANT_BACKEND"
BUILD_DIR_ENV = "GROUPQUANT_BUILD_DIR"
BACKENDS = ("auto", "native", "reference")

#: The kernel sources.
CSRC = Path(__file__).resolve().parent.parent / "csrc"
_CPU_SOURCES = ("ops.cpp", "group_quant_cpu.cpp", "autograd.cpp", "packed_gemm_ops.cpp", "packed_gemm_cpu.cpp",
                "packed_gemm_stream.cpp", "packed_gemm_stream_avx512.cpp", "packed_gemm_stream_avx512_bf16.cpp",
                "packed_gemm_stream_avx512_8bit.cpp", "packed_gemm_cpu_path.cpp", "packed_gemm_workers.cpp",
                "packed_gemm_select.cpp", "packed_gemm_worker_rule.cpp")
_CUDA_SOURCES = ("group_quant_cuda.cu", "group_quant_cuda_ops.cpp", "packed_gemm_cuda.cu", "packed_gemm_cuda_ops.cpp")
#: nvcc's flags for the kernels: no fused multiply-add and no contraction in host code, so the
#: device's arithmetic is the CPU kernels' operation for operation (the numerics contract).
CUDA_FLAGS = ("-O3", "--fmad=false", "-Xcompiler", "-ffp-contract=off")

_lock = threading.Lock()
_state: dict = {"tried": False, "ok": False, "error": None, "cuda": False}


class BackendSettingError(ValueError):
    """``GROUPQUANT_BACKEND`` holds a value that is not a backend (the CLI reports it in one line)."""


def _requested() -> str:
    """The backend asked for by ``GROUPQUANT_BACKEND`` (``auto`` when unset)."""
    value = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if value not in BACKENDS:
        raise BackendSettingError(f"{BACKEND_ENV} must be one of {', '.join(BACKENDS)}, got {value!r} "
                                  f"(unset it for 'auto')")
    return value


def _cpu_flags() -> List[str]:
    """Instruction-set flags for the CPU torch itself dispatches to (so the build fits this CPU)."""
    cap = torch.backends.cpu.get_cpu_capability().upper()
    if cap.startswith("AVX512"):
        return ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c",
                "-mprefer-vector-width=512"]
    if cap.startswith("AVX2"):
        return ["-mavx2", "-mfma", "-mf16c"]
    return []


def build_flags() -> List[str]:
    """Host compiler flags: fast, yet exact (no fast-math, no fused multiply-add contraction)."""
    return ["-O3", "-fopenmp", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math"] + _cpu_flags()


def _cuda_build() -> bool:
    """Whether to compile the CUDA sources: a CUDA build of torch, a GPU and a CUDA toolkit."""
    if torch.version.cuda is None or not torch.cuda.is_available():
        return False
    from torch.utils.cpp_extension import CUDA_HOME
    return CUDA_HOME is not None


def _source_digest(csrc: Path = CSRC) -> str:
    """Short hash of the kernel sources, so that checkouts with different kernels (two versions
    installed side by side, several worktrees) never load or overwrite each other's build."""
    digest = hashlib.sha1()
    for path in sorted(csrc.iterdir()):
        if path.suffix in (".h", ".cpp", ".cu"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:10]


def _path_digest(csrc: Path = CSRC) -> str:
    """Short hash of the sources' absolute path: torch's build files name the sources by path, so
    two checkouts of one commit sharing a build would rebuild it at every switch between them."""
    return hashlib.sha1(str(csrc.resolve()).encode()).hexdigest()[:6]


def extension_name(cuda: bool, csrc: Path = CSRC) -> str:
    """Cache name of the extension: one per CPU capability, kernel sources, their checkout (path)
    and CUDA choice."""
    cap = torch.backends.cpu.get_cpu_capability().lower()
    return f"groupquant_ops_{cap}_{_source_digest(csrc)}_{_path_digest(csrc)}" + ("_cuda" if cuda else "")


def _build_dir(name: str) -> str:
    """Where the extension ``name`` is built: ``GROUPQUANT_BUILD_DIR/name``, else torch's cache."""
    root = os.environ.get(BUILD_DIR_ENV)
    if root:
        path = Path(root).expanduser() / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)
    from torch.utils.cpp_extension import _get_build_directory  # private, stable since torch 1.x
    return _get_build_directory(name, False)


def _library_stamp(build_dir: str, name: str) -> Optional[Tuple[int, int]]:
    """(mtime in ns, inode) of the built library, or None when there is none: changes iff a build ran."""
    try:
        st = (Path(build_dir) / f"{name}.so").stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ino)


def needs_build(build_dir: str, name: str, sources: Sequence[str], csrc: Path = CSRC) -> bool:
    """Whether loading will compile, decided as ninja decides: no library yet, a build file that
    names other source paths (another checkout's, or none), or a source or header newer than it."""
    library = Path(build_dir) / f"{name}.so"
    ninja_file = Path(build_dir) / "build.ninja"
    if not library.exists() or not ninja_file.exists():
        return True
    recipe = ninja_file.read_text(errors="replace")
    if any(os.path.abspath(src) not in recipe for src in sources):
        return True
    inputs = list(sources) + [str(h) for h in csrc.glob("*.h")]
    return max(Path(p).stat().st_mtime_ns for p in inputs) > library.stat().st_mtime_ns


def build_message(cuda: bool, where: str, done: bool = False, seconds: Optional[float] = None) -> str:
    """The line printed before the kernels are compiled, or (``done``) the one after it.

    The line before says what is built (CPU / CUDA, the instruction set torch dispatches to),
    where, and how long it usually takes, so the compiler's 20-60 s of silence read as work, not
    a hang; the line after gives ``seconds``, the build's wall time (None: not measured).
    """
    kind = f"{'CPU + CUDA' if cuda else 'CPU'}, {torch.backends.cpu.get_cpu_capability().lower()}"
    if done:
        took = f" in {seconds:.0f} s" if seconds is not None else ""
        return f"groupquant: built the native kernels ({kind}) into {where}{took} (done)"
    usual = "usually 2-5 min" if cuda else "usually 20-60 s"
    return f"groupquant: building the native kernels ({kind}) into {where} (first use of this checkout, {usual})..."


class BuildProgress:
    """While the kernels compile, one stderr line every ``every`` seconds: the object files done so
    far out of ``total`` and the time taken (a busy 2-core machine took 291 s; silence read as a hang).
    ``every=None``: no lines (a build nobody announced)."""

    def __init__(self, build_dir: str, total: int, every: Optional[float] = 20.0) -> None:
        self.build_dir, self.total, self.every = Path(build_dir), total, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="groupquant-build-progress", daemon=True)
        self._started = time.perf_counter()

    def line(self) -> str:
        """``groupquant: ... k of n source files compiled, s s``."""
        done = min(len(list(self.build_dir.glob("*.o"))), self.total)
        return (f"groupquant: still building the native kernels: {done} of {self.total} source files compiled, "
                f"{time.perf_counter() - self._started:.0f} s")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            print(self.line(), file=sys.stderr, flush=True)

    def __enter__(self) -> "BuildProgress":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _build() -> None:
    from torch.utils import cpp_extension

    cuda = _cuda_build()
    sources = [str(CSRC / s) for s in _CPU_SOURCES + (_CUDA_SOURCES if cuda else ())]
    name = extension_name(cuda)
    build_dir = _build_dir(name)
    before = _library_stamp(build_dir, name)
    announced = needs_build(build_dir, name, sources)
    if announced:
        print(build_message(cuda, build_dir), file=sys.stderr, flush=True)
    started = time.perf_counter()
    cuda_flags = list(CUDA_FLAGS) if cuda else None
    with BuildProgress(build_dir, len(sources), every=20.0 if announced else None):
        cpp_extension.load(name=name, sources=sources, extra_cflags=build_flags(), extra_cuda_cflags=cuda_flags,
                           extra_ldflags=["-fopenmp"], build_directory=build_dir, is_python_module=False,
                           verbose=False)
    if announced or _library_stamp(build_dir, name) != before:  # announced, or a build the check did not foresee
        print(build_message(cuda, build_dir, done=True, seconds=time.perf_counter() - started), file=sys.stderr,
              flush=True)
    _state["cuda"] = cuda


def load() -> bool:
    """Build (first time) and load the extension and register its fake/autograd kernels.

    Returns whether the native ops are usable. With ``GROUPQUANT_BACKEND=native`` a failed build
    raises; with ``auto`` it warns once and the PyTorch reference is used from then on.
    """
    requested = _requested()
    if requested == "reference":
        return False
    cpu_path = requested_cpu_path()  # a bad value is an error before any build
    with _lock:
        if not _state["tried"]:
            _state["tried"] = True
            try:
                _build()
                from . import native_ops  # registers fake kernels and autograd on the loaded ops
                native_ops.register()
                _state["ok"] = True
                _state["cpu_path"] = cpu_path
            except Exception as exc:  # a missing compiler surfaces as many different errors
                _state["error"] = exc
                if requested == "auto":
                    warnings.warn(
                        f"groupquant: the native kernels could not be built ({type(exc).__name__}: "
                        f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r}); using the "
                        f"PyTorch reference (slower, same results). Set {BACKEND_ENV}=reference to silence "
                        "this.", RuntimeWarning, stacklevel=3)
        if _state.pop("cpu_path", None) is not None:
            apply_requested(cpu_path)  # once, after the first load
    if not _state["ok"] and requested == "native":
        raise RuntimeError(f"{BACKEND_ENV}=native but the native kernels failed to build: {_state['error']}")
    return bool(_state["ok"])


def native_available(device: torch.device) -> bool:
    """Whether the native op serves tensors on ``device`` (loading the extension if needed)."""
    if not load():
        return False
    if device.type == "cpu":
        return True
    return device.type == "cuda" and bool(_state["cuda"])


def backend() -> str:
    """``'native'`` when the C++ kernels are in use (building them if needed), else ``'reference'``."""
    return "native" if load() else "reference"


@compile_constant
def _serves_cpu() -> bool:
    """Whether the native ops serve CPU tensors; a constant to torch.compile (builds on first call)."""
    return native_available(torch.device("cpu"))


@compile_constant
def _serves_cuda() -> bool:
    """Whether the native ops serve CUDA tensors; a constant to torch.compile."""
    return native_available(torch.device("cuda"))


_SERVED: dict = {}  # device type -> whether the native ops serve it, once known (eager fast path)


def serves(device: Union[torch.device, str]) -> bool:
    """The backend choice of every native op (group ops and packed GEMM) for tensors on ``device``:
    whether the native kernels run (the first call per device may build them). Remembered per
    device type in eager mode; a constant to torch.compile. ``device`` may be its type's name."""
    kind = device if isinstance(device, str) else device.type
    compiling = torch.compiler.is_compiling()
    if not compiling:
        served = _SERVED.get(kind)
        if served is not None:
            return served
    served = _serves_cpu() if kind == "cpu" else _serves_cuda() if kind == "cuda" else False
    if not compiling:
        _SERVED[kind] = served
    return served
