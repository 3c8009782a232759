"""The simulated lab is a package beside the product (rackready_lab), installed with it for
the demo and the tests: the product (rackready, validation) never imports it, by a contract
with no exemption that lint-imports enforces (a function-level import counts), and no
module of the lab imports one that imports it back (function-level imports and
importlib's count, TYPE_CHECKING's do not)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import tomllib

from rackready.site.paths import PROJECT_ROOT
from tests.unit.project.test_layers import _lint_imports

ROOT = PROJECT_ROOT
LAB = ROOT / "rackready_lab"


def _no_lab_contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "no-lab")


def test_the_product_never_imports_the_lab_and_nothing_is_exempt():
    contract = _no_lab_contract()
    assert contract["type"] == "forbidden"
    assert sorted(contract["source_modules"]) == ["rackready", "validation"]
    assert contract["forbidden_modules"] == ["rackready_lab"]
    assert not contract.get("ignore_imports") and not contract.get("allow_indirect_imports")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for c in config["tool"]["importlinter"]["contracts"]:
        assert "lab" not in " ".join(c.get("layers", [])), c["id"]
        assert not any("lab" in i for i in c.get("ignore_imports", [])), c["id"]


def test_a_function_level_import_of_the_lab_breaks_the_contract(tmp_path: Path):
    """The site layer reaching for the lab's vault password again (inside a function)
    breaks the contract, and lint-imports names the import."""
    for pkg in ("rackready", "rackready_lab", "validation"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", "*.j2", "*.json", "*.css", "*.yml", "*.txt", "*.xml",
            "*.deb", "*.tar*"))
    vault = tmp_path / "rackready" / "site" / "vault.py"
    text = vault.read_text(encoding="utf-8")
    anchor = "    cfg = constants.config\n"
    assert anchor in text
    vault.write_text(text.replace(anchor, anchor + "    from rackready_lab import config  "
                                  "# noqa: F401\n", 1), encoding="utf-8")
    contract = _no_lab_contract()
    ini = ["[importlinter]", "root_packages =", "    rackready", "    validation",
           "    rackready_lab", "exclude_type_checking_imports = True", "",
           f"[importlinter:contract:{contract['id']}]", f"name = {contract['name']}",
           "type = forbidden", "source_modules ="]
    ini += [f"    {m}" for m in contract["source_modules"]] + ["forbidden_modules ="]
    ini += [f"    {m}" for m in contract["forbidden_modules"]]
    (tmp_path / ".importlinter").write_text("\n".join(ini) + "\n", encoding="utf-8")
    proc = _lint_imports(tmp_path, tmp_path, str(tmp_path / ".importlinter"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "BROKEN" in out and "rackready.site.vault -> rackready_lab.config" in out, \
        out[-4000:]


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (never run: no import at run time)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imported(node: ast.AST, package: str) -> list[str]:
    """Dotted names one node imports: import, from-import (relative too), and
    importlib.import_module(f"{__package__}.name") / ("a.b")."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1]) if node.level else ""
        module = ".".join(p for p in (base, node.module or "") if p)
        return [module] + [f"{module}.{a.name}" for a in node.names]
    if isinstance(node, ast.Call) and node.args and \
            ast.unparse(node.func).endswith("import_module"):
        arg = ast.unparse(node.args[0])
        return [arg.replace("f'{__package__}", package).strip("'\"")]
    return []


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports, wherever in it."""
    modules: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_init else parts)] = (path, is_init)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, (path, is_init) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        package = name if is_init else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            for target in _imported(node, package):
                while target and target not in modules:  # a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def import_cycles(package_dir: Path) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    graph = import_graph(package_dir)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def test_no_module_of_the_lab_imports_one_that_imports_it_back():
    cycles = import_cycles(LAB)
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_search_sees_function_level_and_importlib_imports(tmp_path: Path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\nfrom .sub import c\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n")
    (pkg / "sub" / "c.py").write_text(
        "import importlib\n\ndef core():\n"
        "    return importlib.import_module(f'{__package__}.d')\n")
    (pkg / "sub" / "d.py").write_text("from ..sub import c\n")
    (pkg / "e.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .a import g\n")
    (pkg / "a.py").write_text((pkg / "a.py").read_text() + "from . import e\n")
    assert import_cycles(pkg) == [["pkg.a", "pkg.b"], ["pkg.sub.c", "pkg.sub.d"]]
