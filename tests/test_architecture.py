"""docs/architecture.md is held to the code: every top-level package of ``src/groupquant`` is placed
in its layer map, every path it names exists (a ``module.name`` reference names a definition of that
module), its conversion table is ``quantize_model``'s (``nn.convert.REPLACEMENTS``), the
sub-packages of ``nn`` import one another in the order the doc gives, and the packages above ``nn``
find quant layers through the quant-layer protocol, not by probing attributes."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "groupquant"
DOC = ROOT / "docs" / "architecture.md"
#: Folders of the repository a doc path may start with (else it is read inside src/groupquant).
REPO_FOLDERS = ("src", "tests", "docs", "benchmarks", "notebooks")
FILE_SUFFIXES = (".py", ".h", ".cpp", ".cu", ".md", ".json", ".ipynb", ".txt", ".toml", ".cfg")


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _section(text: str, title: str) -> str:
    """The text of the ``## title`` section (up to the next ``## ``)."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _table_rows(section: str) -> List[List[str]]:
    """The body rows of the first markdown table in ``section``, as cells."""
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def _ticked(text: str) -> List[str]:
    return re.findall(r"`([^`]+)`", text)


def top_level_entries() -> Set[str]:
    """The package's top-level modules and packages as the layer map writes them (``inject.py``, ``nn/``)."""
    names = set()
    for entry in PACKAGE.iterdir():
        if entry.name.startswith(("_", ".")) and entry.name != "__main__.py":
            continue
        if entry.is_dir() and (any(entry.glob("*.py")) or entry.name == "csrc"):
            names.add(entry.name + "/")
        elif entry.suffix == ".py":
            names.add(entry.name)
    return names


def test_every_top_level_package_is_placed_in_the_layer_map():
    placed = {name for row in _table_rows(_section(_doc(), "The layers")) for name in _ticked(row[1])}
    missing = sorted(top_level_entries() - placed)
    assert not missing, f"docs/architecture.md's layer map does not place {missing}"
    unknown = sorted(name for name in placed - top_level_entries())
    assert not unknown, f"docs/architecture.md's layer map names {unknown}, which src/groupquant does not hold"


def _expanded(token: str) -> Iterator[str]:
    """``a/b.{h,cpp}`` as ``a/b.h`` and ``a/b.cpp``; other tokens as they are."""
    brace = re.search(r"\{([^}]*)\}", token)
    if brace is None:
        yield token
        return
    for part in brace.group(1).split(","):
        yield token[:brace.start()] + part + token[brace.end():]


def doc_paths(text: str) -> Iterator[Tuple[str, Path, str]]:
    """(as written, file or folder, name defined there or '') for every path the doc names: ticked
    tokens whose first segment is a package folder or a repository folder, and links to docs."""
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    for token in _ticked(text):
        token = token.split("::")[0]
        if "/" not in token or " " in token or "<" in token or token.split("/")[0] not in folders | set(REPO_FOLDERS):
            continue
        for path in _expanded(token):
            base = ROOT if path.split("/")[0] in REPO_FOLDERS else PACKAGE
            yield (token,) + _resolve(base, path)
    for link in re.findall(r"\]\(([\w./-]+\.md)\)", text):
        yield link, DOC.parent / link, ""


def _resolve(base: Path, path: str) -> Tuple[Path, str]:
    """The file or folder ``path`` names under ``base`` and the definition it names (``module.name``)."""
    if path.endswith("/") or path.endswith(FILE_SUFFIXES):
        return base / path, ""
    folder, _, last = path.rpartition("/")
    module, _, name = last.partition(".")
    where = base / folder / module
    return (where.with_suffix(".py") if not where.is_dir() else where), name


def _defines(path: Path, name: str) -> bool:
    """Whether ``path`` (a module) defines ``name`` at its top level or as a method."""
    text = path.read_text(encoding="utf-8")
    return re.search(rf"^\s*(def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]", text, re.M) is not None


def test_every_path_the_doc_names_exists():
    seen = list(doc_paths(_doc()))
    assert len(seen) > 50  # the doc's references were read
    missing = [token for token, path, _ in seen if not path.exists()]
    assert not missing, f"docs/architecture.md names paths that do not exist: {sorted(set(missing))}"
    undefined = [token for token, path, name in seen if name and path.is_file() and not _defines(path, name)]
    assert not undefined, f"docs/architecture.md names definitions their modules lack: {sorted(set(undefined))}"


def test_a_renamed_path_would_be_caught(tmp_path):
    """The path reader against a small doc of known good and bad references."""
    text = ("`nn/convert.py` `ops/api.make_spec` `csrc/packed_gemm_cpu_path.{h,cpp}` `tests/test_architecture.py` "
            "`nn/no_such_file.py` `ops/api.no_such_function` `QuantConv1d/2d/3d` [calibration](calibration.md)")
    found = {(token, path.exists() and (not name or _defines(path, name))) for token, path, name in doc_paths(text)}
    assert found == {("nn/convert.py", True), ("ops/api.make_spec", True), ("csrc/packed_gemm_cpu_path.{h,cpp}", True),
                     ("tests/test_architecture.py", True), ("nn/no_such_file.py", False),
                     ("ops/api.no_such_function", False), ("calibration.md", True)}


def test_the_conversion_table_is_quantize_models():
    from groupquant.nn.convert import REPLACEMENTS
    rows = _table_rows(_section(_doc(), "One route per behaviour").split("**Conversion**", 1)[1])
    table = {tuple(_ticked(cell)[0] for cell in row[:2]) for row in rows}
    code = {(f"nn.{float_cls.__name__}", quant_cls.__name__) for float_cls, quant_cls in REPLACEMENTS.items()}
    assert table == code


#: inside nn: each part (a sub-package, or a module of nn/ itself) -> the parts it may import
NN_MAY_IMPORT = {
    "gemm": {"gemm"},
    "layers": {"layers", "gemm"},
    "recipes": {"gemm"},
    "name_patterns": set(),
    "output_head": {"name_patterns"},
    "functional": {"functional", "layers", "gemm", "recipes"},
    "distributed": {"distributed", "layers", "gemm"},
}


def _nn_imports(text: str, package: List[str]) -> Set[str]:
    """The parts of nn (``layers``, ``recipes``, ...) a module of ``package`` (``['groupquant', 'nn',
    'layers']``) whose source is ``text`` imports, relatively or absolutely."""
    parts = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            names = base + (node.module.split(".") if node.module else [])
            targets = [names + [a.name] for a in node.names] if node.module is None else [names]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".") for a in node.names]
        else:
            continue
        parts.update(t[2] for t in targets if t[:2] == ["groupquant", "nn"] and len(t) > 2)
    return parts


def _package_of(path: Path) -> List[str]:
    """The package a module's relative imports start from."""
    return list(path.relative_to(PACKAGE.parent).with_suffix("").parts)[:-1]


def _nn_part(path: Path) -> str:
    rel = path.relative_to(PACKAGE / "nn").parts
    return rel[0] if len(rel) > 1 else path.stem


def test_nn_sub_packages_import_down_their_order():
    modules = [p for p in (PACKAGE / "nn").rglob("*.py") if _nn_part(p) in NN_MAY_IMPORT]
    assert {_nn_part(p) for p in modules} == set(NN_MAY_IMPORT)  # every part was read
    climbing = sorted(f"{p.relative_to(PACKAGE)} imports nn.{part}" for p in modules
                      for part in _nn_imports(p.read_text(encoding="utf-8"), _package_of(p))
                      - NN_MAY_IMPORT[_nn_part(p)])
    assert not climbing, climbing


def test_the_nn_import_reader_sees_relative_and_absolute_imports():
    """The reader against a module of nn/layers/ with one import of each kind."""
    text = ("from ..gemm.gemm_op import GemmOp\nfrom .. import recipes\nimport groupquant.nn.functional.functional_mode\n"
            "from ...ops import fake_quant\nfrom .linear import QuantLinear\n")
    assert _nn_imports(text, ["groupquant", "nn", "layers"]) == {"gemm", "recipes", "functional", "layers"}


@pytest.mark.parametrize("name", ["OpSettings", "QuantSpec", "GroupQuantized", "Recipe"])
def test_the_records_section_names_the_records(name):
    assert f"`{name}`" in _section(_doc(), "The records between them")


#: The packages that read quant layers through the protocol (groupquant.nn.layers.quant_layers and the
#: layer's weight_spec / set_weight / quant_gemm) instead of probing their attributes.
PROTOCOL_READERS = ("calib", "export", "llm", "train")
#: An attribute probe for a quant layer: ``hasattr(m, "weight_quant")``, ``hasattr(m, "input_quant")``,
#: ``getattr(m, "weight_quant", ...)``.
ATTRIBUTE_PROBE = re.compile(r"""hasattr\([^()]*,\s*["'](weight_quant|input_quant)["']\s*\)"""
                             r"""|getattr\([^()]*,\s*["']weight_quant["']""")


def _attribute_probes(text: str) -> List[str]:
    return [m.group(0) for m in ATTRIBUTE_PROBE.finditer(text)]


def test_the_probe_reader_sees_attribute_probes():
    """The reader below against known probes and their protocol forms."""
    probes = ('if hasattr(child, "weight_quant") and x', "own = f(o) if hasattr(o, 'input_quant') else None",
              'clear = getattr(getattr(m, "weight_quant", None), "clear_cache", None)')
    assert [len(_attribute_probes(p)) for p in probes] == [1, 1, 1]
    protocol = ("if is_quant_layer(child)", "spec = layer.weight_spec", "layer.weight_quant.is_quant_enabled",
                'ROWS = ("weight_quant", "input_quant")')
    assert [_attribute_probes(p) for p in protocol] == [[], [], [], []]


def test_calib_export_llm_train_find_quant_layers_by_the_protocol():
    files = [f for pkg in PROTOCOL_READERS for f in sorted((PACKAGE / pkg).rglob("*.py"))]
    assert len(files) > 40  # the packages were read
    found = [f"{f.relative_to(PACKAGE)}: {probe}" for f in files
             for probe in _attribute_probes(f.read_text(encoding="utf-8"))]
    assert not found, ("test for quant layers with groupquant.nn.layers.quant_layers.is_quant_layer / iter_quant_layers "
                       f"and read them by weight_spec / set_weight / quant_gemm, not by attribute: {found}")
