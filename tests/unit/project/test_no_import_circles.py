"""No import circles in rackready/ and validation/: no two modules import each other,
directly or through others.

A circle makes a module importable only after another one is whole (the classic
"partially initialized module" error, or an import hidden in a function to dodge it) and
splits one concern over files that cannot be read, tested or typed alone. Every import
counts, at any depth (a function's too), except those under `if TYPE_CHECKING:` (types
only, never run). An import names the nearest module it reaches (`from a import b`: the
module a.b, else a), so a package's __init__ that re-exports its own modules is no circle
unless one of them imports the package itself. Run as a script, it prints the circles.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from rackready.site.paths import PROJECT_ROOT

PACKAGES = ("rackready", "validation", "rackready_lab")
EXCLUDED: tuple[str, ...] = ()  # nothing is left out: the lab is held to it as the product


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imported_names(tree: ast.Module, package: str) -> Iterator[str]:
    """Every dotted name imported anywhere in a module (for `from a import b`: a.b, which
    may name a module or a name in a), relative imports resolved against the module's
    package; TYPE_CHECKING blocks skipped."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            todo.extend(node.orelse)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            yield from (f"{base}.{alias.name}" for alias in node.names)
        else:
            todo.extend(ast.iter_child_nodes(node))


def import_graph(root: Path, packages: Iterable[str] = PACKAGES,
                 excluded: Iterable[str] = EXCLUDED) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports (the nearest module each name names)."""
    skip = tuple(excluded)
    paths = {module_name(root, p): p
             for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    paths = {m: p for m, p in paths.items()
             if not any(m == s or m.startswith(s + ".") for s in skip)}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for imported in imported_names(ast.parse(path.read_text(encoding="utf-8")), package):
            while imported and imported not in paths:
                imported = imported.rpartition(".")[0]
            targets.add(imported)
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_the_tree_has_no_import_circle():
    found = circles(import_graph(PROJECT_ROOT))
    assert found == [], "import circles (break each: one module imports the other, never "\
        f"back): {found}"


# packages whose modules talk to each other through public names only (a private name
# imported from a sibling is a class split over files: the circle's usual disguise)
PRIVATE_KEPT = ("rackready.remote", "validation.checks")


def test_no_private_name_is_imported_from_these_packages():
    found = []
    for pkg in PACKAGES:
        for path in sorted((PROJECT_ROOT / pkg).rglob("*.py")):
            name = module_name(PROJECT_ROOT, path)
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join([*parts[: len(parts) - (node.level - 1)], base]).strip(".")
                if base.startswith(PRIVATE_KEPT) and base != name:
                    found += [f"{name}: {base}.{a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == [], found


def test_the_product_and_the_lab_are_all_in_the_graph():
    graph = import_graph(PROJECT_ROOT)
    assert "rackready.remote.session" in graph and "validation.checks.registry" in graph
    assert "rackready_lab.hwsim.faults" in graph and "rackready_lab.redfish.tree" in graph


def test_a_planted_circle_is_caught(tmp_path: Path):
    """Two modules that import each other, one of them only inside a function, make a
    circle; an import under TYPE_CHECKING does not."""
    pkg = tmp_path / "planted"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "a.py").write_text("from planted import b\n", encoding="utf-8")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n    return x\n", encoding="utf-8")
    (pkg / "c.py").write_text("from planted.d import y\n", encoding="utf-8")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                              "    from planted.c import z\n", encoding="utf-8")
    assert circles(import_graph(tmp_path, ("planted",), ())) == [["planted.a", "planted.b"]]


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else PROJECT_ROOT
    excluded = () if "--with-lab" in sys.argv else EXCLUDED
    for circle in circles(import_graph(root, PACKAGES, excluded)):
        print(len(circle), " ".join(circle))
