"""Every role: argument_specs in step with defaults, the files a role must have,
role-prefixed variables, and OS vars for each supported release.

The comparison is strict: a default without a spec entry, a spec entry without a
default, a type that does not fit the default's value, or a literal default that
differs between the two files all fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
# Per-distribution override files first_found may pick (distribution-version, -major, name).
OVERRIDE = re.compile(r"^(Debian|Ubuntu)(-\d+(\.\d+)?)?\.yml$")
# Roles still on an older layout (none left: keep the set for a role being converted).
OLD_LAYOUT: set[str] = set()
PY_TYPES = {"str": str, "bool": bool, "int": int, "list": list, "dict": dict, "float": float}


def load(path: Path):
    return yaml.safe_load(path.read_text()) or {}


def templated(value) -> bool:
    return "{{" in yaml.safe_dump(value)


def test_there_are_roles():
    names = {r.name for r in ROLES}
    assert {"os_baseline", "nvidia_driver", "fabric_manager", "nvme_raid"} <= names


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_has_its_files(role: Path):
    for rel in ("defaults/main.yml", "meta/argument_specs.yml", "meta/main.yml",
                "tasks/main.yml", "README.md"):
        assert (role / rel).is_file(), f"{role.name} lacks {rel}"
    if notifies(role):
        assert (role / "handlers/main.yml").is_file(), f"{role.name} lacks handlers/main.yml"
    readme = (role / "README.md").read_text()
    for heading in ("## Requirements", "## Variables", "## Example", "## It will never"):
        assert heading in readme, f"{role.name} README lacks {heading}"


def mismatches(defaults: dict, spec: dict) -> list[str]:
    """Pure comparison of a role's defaults with its argument spec options."""
    problems = []
    for name in sorted(set(defaults) - set(spec)):
        problems.append(f"{name}: in defaults, not in argument_specs")
    for name in sorted(set(spec) - set(defaults)):
        problems.append(f"{name}: in argument_specs, not in defaults")
    for name in sorted(set(defaults) & set(spec)):
        opt, value = spec[name] or {}, defaults[name]
        if not opt.get("description"):
            problems.append(f"{name}: no description")
        kind = opt.get("type")
        if kind not in PY_TYPES:
            problems.append(f"{name}: type {kind!r} missing or unknown")
            continue
        if templated(value):
            if "default" in opt:
                problems.append(f"{name}: templated default must not be restated in the spec")
            continue
        if kind == "int" and isinstance(value, bool) or not isinstance(value, PY_TYPES[kind]):
            problems.append(f"{name}: default {value!r} is not a {kind}")
        if "default" not in opt:
            problems.append(f"{name}: literal default missing from the spec")
        elif opt["default"] != value:
            problems.append(f"{name}: spec default {opt['default']!r} != defaults {value!r}")
        if "choices" in opt and value not in opt["choices"]:
            problems.append(f"{name}: default {value!r} not among choices {opt['choices']}")
    return problems


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role: Path):
    defaults = load(role / "defaults/main.yml")
    spec = load(role / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert mismatches(defaults, spec) == []


def test_mismatch_detection_catches_each_kind_of_drift():
    spec = {"r_a": {"type": "bool", "description": "x", "default": False},
            "r_b": {"type": "int", "description": "x", "default": 3},
            "r_c": {"type": "str", "description": "x"}}
    assert mismatches({"r_a": False, "r_b": 3, "r_c": "{{ x }}"}, spec) == []
    found = mismatches({"r_a": "no", "r_b": 4, "r_d": 1}, spec)
    assert found == ["r_d: in defaults, not in argument_specs",
                     "r_c: in argument_specs, not in defaults",
                     "r_a: default 'no' is not a bool",
                     "r_a: spec default False != defaults 'no'",
                     "r_b: spec default 3 != defaults 4"]


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_variables_carry_the_role_prefix(role: Path):
    prefix = role.name + "_"
    names = list(load(role / "defaults/main.yml"))
    for vars_file in (role / "vars").glob("*.yml"):
        names += [n.lstrip("_") for n in load(vars_file)]
        assert all(n.startswith("__" + prefix) for n in load(vars_file)), vars_file
    assert [n for n in names if not n.startswith(prefix)] == []
    # registered results follow <role>_register_*
    for task_file in (role / "tasks").glob("*.yml"):
        for reg in re.findall(r"^\s*register:\s*(\S+)", task_file.read_text(), re.M):
            assert reg.startswith(prefix + "register_"), f"{task_file}: {reg}"


def notifies(role: Path) -> bool:
    return any(re.search(r"^\s*notify:", f.read_text(), re.M)
               for f in (role / "tasks").glob("*.yml"))


def layout_problems(role: Path) -> list[str]:
    """vars/main.yml plus per-distribution overrides only where they differ; the OS
    refusal comes from the os_support dependency, never a copied task file."""
    if role.name in ("os_support", "bios"):  # bios talks to the BMC, never to the node's OS
        return []
    problems = []
    deps = [d.get("role", d) if isinstance(d, dict) else d
            for d in load(role / "meta/main.yml").get("dependencies") or ()]
    if "os_support" not in deps:
        problems.append("meta/main.yml does not depend on os_support")
    if (role / "tasks/os_vars.yml").exists():
        problems.append("tasks/os_vars.yml: a copied task file (os_support refuses the OS)")
    files = sorted((role / "vars").glob("*.yml")) if (role / "vars").is_dir() else []
    main = load(role / "vars/main.yml") if (role / "vars/main.yml").is_file() else {}
    overrides = [f for f in files if f.name != "main.yml"]
    for f in overrides:
        if not OVERRIDE.match(f.name):
            problems.append(f"vars/{f.name}: not a distribution override first_found picks")
        same = sorted(k for k, v in load(f).items() if k in main and main[k] == v)
        if same:
            problems.append(f"vars/{f.name} restates vars/main.yml: {', '.join(same)}")
    texts = {}
    for f in files:
        if f.read_bytes() in texts:
            problems.append(f"vars/{f.name} is a copy of vars/{texts[f.read_bytes()]}")
        texts.setdefault(f.read_bytes(), f.name)
    if len({frozenset(load(f)) for f in overrides}) > 1:
        problems.append("the distribution overrides define different names")
    if overrides and "first_found" not in (role / "tasks/main.yml").read_text():
        problems.append("vars overrides exist but tasks/main.yml never loads them")
    return problems


@pytest.mark.parametrize("role", [r for r in ROLES if r.name not in OLD_LAYOUT],
                         ids=lambda p: p.name)
def test_vars_are_main_plus_overrides_only_where_they_differ(role: Path):
    assert layout_problems(role) == []


def test_layout_check_catches_copies(tmp_path: Path):
    role = tmp_path / "demo"
    for rel, text in {"meta/main.yml": "dependencies: []\n", "tasks/main.yml": "---\n",
                      "tasks/os_vars.yml": "---\n", "vars/main.yml": "__demo_a: 1\n",
                      "vars/Debian-12.yml": "__demo_a: 1\n",
                      "vars/Ubuntu-22.04.yml": "__demo_a: 1\n",
                      "vars/extra.yml": "__demo_b: 2\n"}.items():
        (role / rel).parent.mkdir(parents=True, exist_ok=True)
        (role / rel).write_text(text)
    found = layout_problems(role)
    assert "meta/main.yml does not depend on os_support" in found
    assert any("os_vars.yml" in p for p in found)
    assert "vars/Debian-12.yml restates vars/main.yml: __demo_a" in found
    assert "vars/Ubuntu-22.04.yml is a copy of vars/Debian-12.yml" in found
    assert "vars/extra.yml: not a distribution override first_found picks" in found
    assert "vars overrides exist but tasks/main.yml never loads them" in found


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_handlers_use_listen_topics(role: Path):
    if not notifies(role):
        return
    handlers = load(role / "handlers/main.yml")
    assert handlers, f"{role.name} has no handlers"
    for h in handlers:
        assert h.get("listen"), f"{role.name}: handler {h['name']!r} has no listen topic"


def test_site_imports_one_tagged_playbook_per_stage():
    site = load(ROOT / "playbooks/site.yml")
    stages = [Path(p["ansible.builtin.import_playbook"]).stem for p in site]
    assert stages == ["bios", "baseline", "driver", "fabric", "cuda", "nccl", "dcgm", "rdma",
                      "storage", "validation_tools"]
    for stage in stages:
        (play,) = load(ROOT / "playbooks" / f"{stage}.yml")
        assert play["tags"] == [stage]
        assert play["hosts"] == "all:!staging"
    # out of band: the bios stage never contacts the node's OS (no facts, no SSH)
    (bios_play,) = load(ROOT / "playbooks" / "bios.yml")
    assert bios_play["gather_facts"] is False


def test_rack1_inventory_shape_and_no_plain_secrets():
    inv = ROOT / "inventories/rack1"
    hosts = load(inv / "hosts.yml")["all"]["children"]
    assert len(hosts["xe9680"]["hosts"]) == 4 and len(hosts["dl380a"]["hosts"]) == 2
    nodes = {**hosts["xe9680"]["hosts"], **hosts["dl380a"]["hosts"]}
    assert sorted(n["rackready_fabric"] for n in nodes.values()).count("ib") == 2
    assert all(n["rackready_bmc_address"] for n in nodes.values())
    assert load(inv / "group_vars/xe9680.yml")["rackready_profile"] == "xe9680-h200"
    assert load(inv / "group_vars/dl380a.yml")["rackready_profile"] == "dl380a-gen12-h200nvl"
    for f in inv.rglob("*.yml"):
        for key, value in (load(f) or {}).items():
            if "password" in key or "secret" in key:
                assert "lookup(" in str(value) or "$ANSIBLE_VAULT" in str(value), f"{f}: {key}"


def test_ansible_cfg_verifies_host_keys():
    cfg = (ROOT / "ansible.cfg").read_text()
    assert re.search(r"^host_key_checking\s*=\s*True", cfg, re.M)
    assert "StrictHostKeyChecking=no" not in cfg
