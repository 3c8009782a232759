"""The node venv's Python requirements are declared once, pinned, and every consumer
(validation_tools, offline_bundle, the lab mirror's wheelhouse) reads that one file."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rackready.site.paths import PROJECT_ROOT
from rackready_lab import repo

ROOT = PROJECT_ROOT
REQS = ROOT / "roles/validation_tools/files/node-requirements.txt"
LOCK = REQS.with_suffix(".lock")  # the same pins and their dependencies, by sha256
# Import name -> distribution for what the node-side suite imports.
DISTRIBUTIONS = {"torch": "torch", "numpy": "numpy", "yaml": "pyyaml", "pynvml": "nvidia-ml-py"}
# What the node needs without importing it: torch.distributed.checkpoint needs numpy.
INDIRECT = {"numpy"}


def parsed() -> list[tuple[Requirement, str]]:
    out = []
    for line in REQS.read_text().splitlines():
        spec, _, why = line.partition("#")
        if spec.strip():
            out.append((Requirement(spec.strip()), why.strip()))
    return out


def names() -> set[str]:
    return {canonicalize_name(r.name) for r, _ in parsed()}


def test_every_requirement_is_pinned_and_says_why():
    reqs = parsed()
    assert reqs, f"{REQS} declares nothing"
    for req, why in reqs:
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{req}: pin it with =="
        assert why, f"{req}: say in a comment why the node needs it"
    assert len(names()) == len(reqs), "a requirement is listed twice"


def _third_party_imports() -> set[str]:
    found = set()
    for path in (ROOT / "validation").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            found |= {t for t in tops if t not in sys.stdlib_module_names
                      and t not in ("validation", "__future__")}
    return found


def test_the_file_covers_what_the_node_suite_imports():
    imported = _third_party_imports()
    unknown = imported - set(DISTRIBUTIONS)
    assert not unknown, f"validation/ imports {unknown}: map it here and add it to {REQS.name}"
    needed = {DISTRIBUTIONS[m] for m in imported} | INDIRECT
    assert needed == names(), f"needed {sorted(needed)}, declared {sorted(names())}"


def test_torch_is_the_version_the_cpu_tests_use():
    # the `gpu` extra (the CPU tests' torch); tomllib is 3.11+, the project supports 3.10
    gpu = re.search(r"^gpu = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert gpu, "pyproject.toml has no gpu extra"
    reqs = [Requirement(r) for r in re.findall(r'"([^"]+)"', gpu.group(1))]
    project_torch = next(str(r.specifier) for r in reqs if r.name == "torch")
    node_torch = next(str(r.specifier) for r, _ in parsed() if r.name == "torch")
    assert node_torch == project_torch


def _tasks(role: str) -> list[dict]:
    return yaml.safe_load((ROOT / f"roles/{role}/tasks/main.yml").read_text())


def _vars(role: str) -> dict:
    return yaml.safe_load((ROOT / f"roles/{role}/vars/main.yml").read_text())


def test_validation_tools_installs_exactly_the_file():
    tasks = _tasks("validation_tools")
    dest = "{{ __validation_tools_requirements }}"
    copy = next(t["ansible.builtin.copy"] for t in tasks if "ansible.builtin.copy" in t)
    assert (ROOT / "roles/validation_tools/files" / copy["src"]) == LOCK
    assert copy["dest"] == dest
    pips = [t["ansible.builtin.pip"] for t in tasks if "ansible.builtin.pip" in t]
    # the node's copy, or (with an offline bundle) the bundle's hash-pinned file of it
    assert len(pips) == 1
    assert pips[0]["requirements"] == "{{ __validation_tools_pip_requirements }}"
    assert "else __validation_tools_requirements }}" in \
        _vars("validation_tools")["__validation_tools_pip_requirements"]
    assert "name" not in pips[0], "the pip task must not list packages of its own"
    assert _vars("validation_tools")["__validation_tools_requirements"].endswith(
        "/node-requirements.lock")


def test_the_offline_bundle_downloads_exactly_the_file():
    tasks = _tasks("offline_bundle")
    variables = _vars("offline_bundle")
    src = variables["__offline_bundle_requirements_src"].replace(
        "{{ role_path }}", str(ROOT / "roles/offline_bundle"))
    assert Path(src).resolve() == REQS
    copy = next(t["ansible.builtin.copy"] for t in tasks if "ansible.builtin.copy" in t
                and "requirements" in t["ansible.builtin.copy"].get("src", ""))
    assert copy["src"] == "{{ __offline_bundle_requirements_src }}"
    assert copy["dest"] == "{{ __offline_bundle_requirements }}"
    download = next(t["ansible.builtin.command"] for t in tasks
                    if "pip download" in str(t.get("ansible.builtin.command", "")))
    assert "-r {{ __offline_bundle_lock | quote }}" in download


def test_the_lab_wheelhouse_downloads_exactly_the_file(monkeypatch, tmp_path):
    assert repo.NODE_REQUIREMENTS == REQS
    calls = []
    monkeypatch.setattr(repo, "WHEEL_CACHE", tmp_path)
    monkeypatch.setattr(repo, "run", lambda cmd, **kw: calls.append(cmd))
    repo.fetch_wheels()
    assert len(calls) == 1
    args = calls[0][calls[0].index(str(tmp_path)) + 1:]
    assert args == ["--require-hashes", "-r", str(LOCK)]
    assert repo.NODE_LOCK == LOCK
    repo.fetch_wheels()  # the same file again: the cache stands
    assert len(calls) == 1


def test_node_requirements_drops_comments_and_blanks(tmp_path):
    f = tmp_path / "r.txt"
    f.write_text("# head\n\nfoo==1.0  # why\n  bar==2  \n")
    assert repo.node_requirements(f) == ["foo==1.0", "bar==2"]


@pytest.mark.parametrize("top", ["roles", "rackready", "rackready_lab"])
def test_no_other_list_of_the_requirements(top):
    # A quoted name (optionally with a version) or a YAML list item naming one.
    alt = "|".join(re.escape(n) for n in sorted(names() | {"pyyaml"}))
    quoted = re.compile(rf"""["']({alt})\s*([=<>~!]=[^"']*)?["']""", re.I)
    item = re.compile(rf"""^\s*-\s*["']?({alt})\b""", re.I | re.M)
    hits = []
    for path in (ROOT / top).rglob("*"):
        if path.suffix not in (".py", ".yml", ".yaml", ".txt", ".j2") or path == REQS:
            continue
        text = path.read_text(errors="replace")
        hits += [f"{path.relative_to(ROOT)}: {m.group(0).strip()}"
                 for m in (*quoted.finditer(text), *item.finditer(text))]
    assert not hits, f"requirements listed outside {REQS.name}: {hits}"
