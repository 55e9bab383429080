"""The layering docs/ARCHITECTURE.md states, checked against the package's real imports.

The "Layering" table of the architecture document says, per package (a
subpackage or a top-level module of ``ego2web_replay``), which others it may
import; every ``import`` statement in the package (also those inside
functions) is read with :mod:`ast` and each edge between two packages must be
allowed by the table or listed among its known exceptions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ego2web_replay"
DOC = ROOT / "docs" / "ARCHITECTURE.md"
ROOT_UNIT = "(package)"  # ego2web_replay/__init__.py; every package may import it


def unit_of(module: str) -> str:
    """``ego2web_replay.judge.run`` → ``judge``; the package itself → ``(package)``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT_UNIT


def module_name(path: Path, package_dir: Path) -> str:
    rel = path.relative_to(package_dir.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, package_dir: Path) -> set[str]:
    """The package's modules that ``path`` imports, resolved to absolute names."""
    me = module_name(path, package_dir)
    pkg = me if path.name == "__init__.py" else me.rpartition(".")[0]
    top = package_dir.name
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == top)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != top:
                continue
            if node.module is None or target == top:  # `from .. import x` may name a submodule
                found.update(_submodule_or_package(target, a.name, package_dir) for a in node.names)
            else:
                found.add(target)
    return found


def _submodule_or_package(package: str, name: str, package_dir: Path) -> str:
    folder = package_dir.parent.joinpath(*package.split("."))
    return f"{package}.{name}" if (folder / name).is_dir() or (folder / f"{name}.py").exists() else package


def import_edges(package_dir: Path) -> set[tuple[str, str]]:
    """(importing module, imported module) pairs that cross from one package unit to another."""
    edges = set()
    for path in sorted(package_dir.rglob("*.py")):
        me = module_name(path, package_dir)
        for target in imported_modules(path, package_dir):
            if unit_of(me) != unit_of(target):
                edges.add((me, target))
    return edges


def units(package_dir: Path) -> set[str]:
    found = {ROOT_UNIT}
    for p in package_dir.iterdir():
        if p.is_dir() and any(p.glob("*.py")):
            found.add(p.name)
        elif p.suffix == ".py" and p.name != "__init__.py":
            found.add(p.stem)
    return found


def parse_layering(text: str, all_units: set[str]) -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """The table rows (unit → allowed units) and the known exceptions (module → module)."""
    section = text.split("## Layering", 1)[1].split("\n## ", 1)[0]
    allowed: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        names = set(re.findall(r"`([^`]+)`", cells[1]))
        may = (all_units - names) if cells[1].startswith("any") else names
        for unit in re.findall(r"`([^`]+)`", cells[0]):
            allowed[unit] = may | {ROOT_UNIT}
    exceptions = set(re.findall(r"^- `([\w.]+)` → `([\w.]+)`", section, re.M))
    return allowed, exceptions


def violations(package_dir: Path, doc_text: str) -> list[str]:
    all_units = units(package_dir)
    allowed, exceptions = parse_layering(doc_text, all_units)
    problems = [f"{u}: not in the layering table of docs/ARCHITECTURE.md; add a row saying what it may import"
                for u in sorted(all_units - set(allowed) - {ROOT_UNIT})]
    for src, dst in sorted(import_edges(package_dir)):
        s, d = unit_of(src), unit_of(dst)
        if s in allowed and d not in allowed[s] and (src, dst) not in exceptions:
            problems.append(f"{src} imports {dst}: `{s}` may not import `{d}` (docs/ARCHITECTURE.md, Layering)")
    return problems


def test_the_package_follows_the_documented_layering():
    assert violations(PACKAGE, DOC.read_text("utf-8")) == []


def test_the_table_names_only_real_packages():
    all_units = units(PACKAGE)
    allowed, exceptions = parse_layering(DOC.read_text("utf-8"), all_units)
    assert set(allowed) <= all_units
    named = {n for may in allowed.values() for n in may}
    assert named <= all_units, named - all_units
    assert {unit_of(m) for pair in exceptions for m in pair} <= all_units


@pytest.fixture
def toy(tmp_path):
    """A small package with a stage that reaches up into the tracking layer."""
    pkg = tmp_path / "ego2web_replay"
    for rel, body in {
        "__init__.py": "",
        "errors.py": "",
        "runner/__init__.py": "",
        "runner/run.py": "from ..errors import X\n\ndef f():\n    from ..tracking.ingest import record_run\n",
        "tracking/__init__.py": "",
        "tracking/ingest.py": "from ego2web_replay.runner import run\nfrom .. import errors\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(body)
    return pkg


DOC_TOY = """## Layering
| package | may import |
|---|---|
| `errors` | nothing |
| `runner` | `errors` |
| `tracking` | any except `nothing` |
"""


def test_a_forbidden_edge_fails_even_inside_a_function(toy):
    assert violations(toy, DOC_TOY) == [
        "ego2web_replay.runner.run imports ego2web_replay.tracking.ingest: `runner` may not import `tracking` "
        "(docs/ARCHITECTURE.md, Layering)"]
    assert ("ego2web_replay.tracking.ingest", "ego2web_replay.errors") in import_edges(toy)


def test_known_exceptions_and_missing_rows(toy):
    excused = DOC_TOY + "\n- `ego2web_replay.runner.run` → `ego2web_replay.tracking.ingest` (to be removed)\n"
    assert violations(toy, excused) == []
    (toy / "drift.py").write_text("")
    assert violations(toy, excused) == [
        "drift: not in the layering table of docs/ARCHITECTURE.md; add a row saying what it may import"]
