"""One place for each version pin, and everything that restates it checked against it.

The profiles' pins (driver branch, CUDA, NCCL) live once, in validation/profiles/_common.yml;
every listable profile inherits them. Provisioning's pins live in their roles' defaults (a
role cannot read the node-side profile, nor the node the roles). This test fails when the
two drift, or when the hwsim stand-in packages, the sample rack's group_vars, the roles'
README tables or docs/design.md's package table state another version than the role.
"""

from __future__ import annotations

import ast
import re

import pytest
import yaml

from rackready.site.paths import PROJECT_ROOT
from validation.profile import PROFILE_DIR, list_profiles, load_profile

ROOT = PROJECT_ROOT
PINNED = {  # role -> its version variables
    "nvidia_driver": ("nvidia_driver_branch", "nvidia_driver_version"),
    "cuda_toolkit": ("cuda_toolkit_version", "cuda_toolkit_package_version"),
    "nccl": ("nccl_version", "nccl_cuda_version"),
    "dcgm": ("dcgm_version",),
    "validation_tools": ("validation_tools_nccl_tests_version",),
}


def role_pins() -> dict[str, str]:
    out = {}
    for role, names in PINNED.items():
        defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
        out.update({n: str(defaults[n]) for n in names})
    return out


def hwsim_pins() -> dict[str, str]:
    """The stand-in packages' versions, read from the module's source wherever it lives."""
    (src,) = ROOT.glob("rackready*/**/hwsim/packages.py")
    tree = ast.parse(src.read_text())
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def test_the_profile_pins_live_once_in_the_common_base():
    common = yaml.safe_load((PROFILE_DIR / "_common.yml").read_text())["inventory"]["gpu"]
    for path in PROFILE_DIR.glob("*.yml"):
        if path.name == "_common.yml":
            continue
        data = yaml.safe_load(path.read_text())  # an include is a list of thresholds
        gpu = (data.get("inventory") or {}).get("gpu") or {} if isinstance(data, dict) else {}
        assert not {"driver_branch", "cuda", "nccl"} & set(gpu), path.name
    for name in list_profiles():
        gpu = load_profile(name).inventory["gpu"]
        assert (gpu["driver_branch"], gpu["cuda"], gpu["nccl"]) == \
            (common["driver_branch"], common["cuda"], common["nccl"]), name


def test_the_roles_install_what_the_profiles_expect():
    gpu = yaml.safe_load((PROFILE_DIR / "_common.yml").read_text())["inventory"]["gpu"]
    pins = role_pins()
    assert pins["nvidia_driver_branch"] == str(gpu["driver_branch"])
    assert pins["nvidia_driver_version"].startswith(f"{gpu['driver_branch']}.")
    assert pins["cuda_toolkit_version"] == gpu["cuda"] == pins["nccl_cuda_version"]
    assert pins["cuda_toolkit_package_version"].startswith(f"{gpu['cuda']}.")
    assert pins["nccl_version"].split("-")[0] == gpu["nccl"]


def test_the_hwsim_packages_are_built_at_the_roles_pins():
    pins, hw = role_pins(), hwsim_pins()
    assert hw["DRIVER"] == pins["nvidia_driver_version"]
    assert hw["CUDA"] == pins["cuda_toolkit_package_version"]
    assert hw["NCCL"] == f"{pins['nccl_version']}+cuda{pins['nccl_cuda_version']}"
    assert hw["DCGM"] == pins["dcgm_version"]
    assert hw["NCCL_TESTS"].split("-")[0] == pins["validation_tools_nccl_tests_version"]


def test_the_sample_rack_pins_what_the_roles_pin():
    site = yaml.safe_load((ROOT / "inventories" / "rack1" / "group_vars" / "all.yml").read_text())
    pins = role_pins()
    stated = {n: str(site[n]) for n in pins if n in site}
    assert stated and stated == {n: pins[n] for n in stated}


@pytest.mark.parametrize("role", sorted(PINNED))
def test_a_roles_readme_table_shows_its_pins(role):
    readme = (ROOT / "roles" / role / "README.md").read_text()
    pins = role_pins()
    for name in PINNED[role]:
        row = re.search(rf"^\| `{name}` \| `?([^`|]+?)`? \|", readme, re.M)
        if row:
            assert row.group(1).strip() == pins[name], name


def test_the_design_package_table_shows_the_pins():
    design = (ROOT / "docs" / "design.md").read_text()
    pins, hw = role_pins(), hwsim_pins()
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r"^\| ([^|]+?) \| [^|]+ \| ([^|]+?) \|$", design, re.M)}
    assert rows["driver (open modules)"] == rows["fabric manager"] == hw["DRIVER"]
    assert rows["CUDA"] == hw["CUDA"] and rows["NCCL"] == hw["NCCL"]
    assert rows["DCGM"] == hw["DCGM"]
    assert pins  # the hwsim side is tied to the roles above
