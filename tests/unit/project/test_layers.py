"""The controller's layout holds: the layer contract (lint-imports, as `invoke lint` runs
it) passes on the tree and fails on a violating import; one module writes every
outcome, reason and failing-part wording."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
PACKAGE = ROOT / "rackready"
LAB = ROOT / "rackready_lab"  # beside the product; it words no outcome either
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
# decide.outcome is the one writer; the keys it writes and the functions that word them
WRITER = PACKAGE / "decide" / "outcome.py"
WORDED_KEYS = ("outcome_reason", "component")
WORDING_FUNCTIONS = {"component", "component_words", "component_of", "decide_node",
                     "rack_judgement", "group_outcome", "link_component",
                     "missing_check_verdict", "rack_outcome"}


def _lint_imports(cwd: Path, pythonpath: Path, *config: str) -> subprocess.CompletedProcess:
    env = {"PATH": f"{LINT_IMPORTS.parent}:/usr/bin:/bin", "PYTHONPATH": str(pythonpath),
           "HOME": str(Path.home()), "NO_COLOR": "1"}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", *config], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_tree_keeps_its_layers():
    proc = _lint_imports(ROOT, ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "0 broken" in proc.stdout


def _ini(contract: dict) -> str:
    """One layers contract of pyproject's, as an .importlinter (INI) file for the copy."""
    lines = ["[importlinter]", "root_packages =", "    rackready",
             "exclude_type_checking_imports = True",
             "", f"[importlinter:contract:{contract['id']}]", f"name = {contract['name']}",
             f"type = {contract['type']}", "layers ="]
    lines += [f"    {layer}" for layer in contract["layers"]]
    lines += ["ignore_imports ="] + [f"    {i}" for i in contract.get("ignore_imports", [])]
    return "\n".join(lines) + "\n"


def test_a_layer_importing_one_above_it_fails_the_contract(tmp_path: Path):
    """decide importing report (a renderer deciding, or a judge reading a report) breaks
    the contract, and lint-imports names the import."""
    copy = tmp_path / "rackready"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "*.j2", "*.json", "*.css", "*.yml", "*.deb", "*.tar*"))
    outcome = copy / "decide" / "outcome.py"
    text = outcome.read_text(encoding="utf-8")
    outcome.write_text(text.replace("from __future__ import annotations\n",
                                    "from __future__ import annotations\n\n"
                                    "from rackready.report import naming  # noqa: F401\n", 1),
                       encoding="utf-8")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = next(c for c in config["tool"]["importlinter"]["contracts"]
                  if c["type"] == "layers")
    (tmp_path / ".importlinter").write_text(_ini(layers), encoding="utf-8")
    proc = _lint_imports(tmp_path, tmp_path, str(tmp_path / ".importlinter"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "BROKEN" in out and "rackready.decide.outcome -> rackready.report" in out, out[-4000:]


def _is_copy(value: ast.expr, key: str) -> bool:
    """d[key], d.get(key[, default]), or either `or` a default: read, not written."""
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        return _is_copy(value.values[0], key)
    if isinstance(value, ast.Subscript):
        return isinstance(value.slice, ast.Constant) and value.slice.value == key
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and value.func.attr == "get" and value.args:
        return isinstance(value.args[0], ast.Constant) and value.args[0].value == key
    return False


def _second_writers(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(ROOT)
    in_decide = path.is_relative_to(PACKAGE / "decide")
    # inside decide/, a value decide.outcome wrote (a call of one of its functions) is its
    from_writer = {a.asname or a.name for n in ast.walk(tree)
                   if isinstance(n, ast.ImportFrom) and n.module == "rackready.decide.outcome"
                   for a in n.names} if in_decide else set()
    found = []

    def written(key: str, value: ast.expr, line: int) -> None:
        if _is_copy(value, key):
            return
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                and value.func.id in from_writer:
            return
        found.append(f"{rel}:{line}: writes {key!r}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            for k, v in zip(node.keys, node.values, strict=True):
                if not isinstance(k, ast.Constant) or k.value not in WORDED_KEYS:
                    continue
                # "component" names a failing part in a verdict; elsewhere (a BMC firmware
                # label) it is a label
                if k.value == "component" and not keys & {"outcome", "metric", "message"}:
                    continue
                written(k.value, v, k.lineno)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                targets = target.elts if isinstance(target, ast.Tuple) else [target]
                for t in targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) \
                            and t.slice.value in WORDED_KEYS:
                        found.append(f"{rel}:{node.lineno}: assigns [{t.slice.value!r}]")
        elif isinstance(node, ast.FunctionDef) and node.name in WORDING_FUNCTIONS:
            found.append(f"{rel}:{node.lineno}: defines {node.name}()")
        elif isinstance(node, ast.ImportFrom) and node.module == "validation.judge" \
                and any(a.name == "component" for a in node.names):
            found.append(f"{rel}:{node.lineno}: imports validation.judge.component")
        elif isinstance(node, ast.ImportFrom) and node.module == "rackready.decide.outcome" \
                and not in_decide:
            wording = sorted(a.name for a in node.names if a.name in WORDING_FUNCTIONS)
            if wording:
                found.append(f"{rel}:{node.lineno}: imports {', '.join(wording)}")
    return found


def test_one_module_writes_every_outcome_reason_and_failing_part():
    """decide.outcome writes the words; every other module of the controller copies
    them (a report, JUnit, the summary, the exit code) or asks decide.outcome."""
    offenders = [f for path in sorted([*PACKAGE.rglob("*.py"), *LAB.rglob("*.py")])
                 if path != WRITER
                 for f in _second_writers(path)]
    assert offenders == [], "\n".join(offenders)
    assert _second_writers(WRITER) != [], "the check finds the one writer's own writes"
