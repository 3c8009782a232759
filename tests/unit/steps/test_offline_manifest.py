"""The offline bundle carries what the node roles' variables name, nccl-tests included,
and validation_tools rebuilds nccl-tests when its pinned release changes."""

from __future__ import annotations

import base64
import shutil
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml

from rackready.errors import UserError
from rackready.site.paths import PROJECT_ROOT
from rackready.steps import offline_manifest, provision
from rackready.steps.offline_manifest import Manifest, Source, from_vars, manifest
from rackready_lab.hwsim import packages as hwsim_packages

ROOT = PROJECT_ROOT
ROLES = ROOT / "roles"


def default(role: str, name: str):
    return yaml.safe_load((ROLES / role / "defaults/main.yml").read_text())[name]


@pytest.fixture()
def rack(tmp_path: Path) -> Path:
    inv = tmp_path / "rack"
    shutil.copytree(ROOT / "inventories" / "rack1", inv)
    return inv


def set_group_var(inv: Path, group: str, **values) -> None:
    f = inv / "group_vars" / f"{group}.yml"
    data = yaml.safe_load(f.read_text()) or {}
    f.write_text("---\n" + yaml.safe_dump({**data, **values}))


def pinned(m: Manifest) -> dict[str, str]:
    return dict(p.split("=", 1) for p in m.packages if "=" in p)


def test_the_bundle_pins_what_the_node_roles_install(rack: Path):
    m = manifest(rack, "stage01")
    pins = pinned(m)
    driver = default("nvidia_driver", "nvidia_driver_version")
    for pkg in default("nvidia_driver", "nvidia_driver_packages"):
        assert pins[pkg] == driver, pkg
    assert pins["nvidia-fabricmanager"] == pins["libnvidia-nscq"] == driver
    assert pins["cuda-toolkit-13-0"] == default("cuda_toolkit", "cuda_toolkit_package_version")
    assert pins["libnccl2"] == pins["libnccl-dev"] == \
        default("nccl", "nccl_version") + "+cuda" + default("nccl", "nccl_cuda_version")
    assert pins["datacenter-gpu-manager-4-core"] == default("dcgm", "dcgm_version")
    assert pins["datacenter-gpu-manager-4-cuda13"] == default("dcgm", "dcgm_version")
    for pkg in (default("validation_tools", "validation_tools_packages")
                + default("os_baseline", "os_baseline_packages") + ["mdadm", "xfsprogs"]):
        assert pkg in m.packages, pkg
    assert len(m.packages) == len(set(m.packages))


def test_the_bundle_carries_the_nccl_tests_release_the_role_builds(rack: Path):
    version = default("validation_tools", "validation_tools_nccl_tests_version")
    m = manifest(rack, "stage01")
    assert m.sources == (Source(
        f"https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v{version}.tar.gz",
        f"nccl-tests-{version}.tar.gz"),)
    assert "build-essential" in m.packages  # the node compiles it with no network
    # rack1's nodes take it from the bundle's src/ (verified against its manifest)
    groups = yaml.safe_load((rack / "group_vars/all.yml").read_text())
    assert groups["validation_tools_bundle_url"] and "validation_tools_nccl_tests_url" not in groups
    vt = {**yaml.safe_load((ROLES / "validation_tools/defaults/main.yml").read_text()),
          **yaml.safe_load((ROLES / "validation_tools/vars/main.yml").read_text()),
          "validation_tools_bundle_url": groups["validation_tools_bundle_url"]}
    assert _template(vt["__validation_tools_nccl_tests_source"], **vt).endswith(
        f"/bundle/{offline_manifest.SRC}/{m.sources[0].dest}")


def test_with_a_prebuilt_package_the_bundle_carries_it_at_the_release(rack: Path):
    version = default("validation_tools", "validation_tools_nccl_tests_version")
    set_group_var(rack, "staging", validation_tools_nccl_tests_package="nccl-tests")
    m = manifest(rack, "stage01")
    assert pinned(m)["nccl-tests"] == f"{version}-*"
    assert m.sources == () and "build-essential" not in m.packages
    # the lab's stand-in package is that release (the lab bundle test installs it)
    assert fnmatch(hwsim_packages.NCCL_TESTS, pinned(m)["nccl-tests"])


def test_a_group_var_moves_the_bundle(rack: Path):
    before = manifest(rack, "stage01")
    set_group_var(rack, "all", nvidia_driver_version="580.200.01-1", nccl_version="2.29.1-1",
                  dcgm_version="1:4.5.0-1", cuda_toolkit_version="13.1",
                  cuda_toolkit_package_version="13.1.0-1",
                  validation_tools_nccl_tests_version="2.20.1")
    after = manifest(rack, "stage01")
    pins = pinned(after)
    assert pins["nvidia-open"] == pins["nvidia-fabricmanager"] == "580.200.01-1"
    assert pins["libnccl2"] == "2.29.1-1+cuda13.0"
    assert pins["cuda-toolkit-13-1"] == "13.1.0-1" and "cuda-toolkit-13-0" not in pins
    assert pins["datacenter-gpu-manager-4-cuda13"] == "1:4.5.0-1"
    assert after.sources[0].dest == "nccl-tests-2.20.1.tar.gz" != before.sources[0].dest
    assert after.sources[0].url.endswith("/v2.20.1.tar.gz")


def test_a_role_default_moves_the_bundle(tmp_path: Path, rack: Path, monkeypatch):
    # a changed role default (a copy of the tree), with nothing in the inventory
    tree = tmp_path / "tree"
    shutil.copytree(ROLES, tree / "roles")
    f = tree / "roles/validation_tools/defaults/main.yml"
    f.write_text(f.read_text().replace('validation_tools_packages:\n',
                                       'validation_tools_packages:\n  - iperf3\n'))
    f = tree / "roles/rdma_network/defaults/main.yml"
    f.write_text(f.read_text().replace("rdma_network_stack: doca", "rdma_network_stack: inbox"))
    for name in ("nvidia_driver_version", "nccl_version", "dcgm_version",
                 "validation_tools_nccl_tests_version", "validation_tools_nccl_tests_url"):
        data = yaml.safe_load((rack / "group_vars/all.yml").read_text())
        data.pop(name, None)
        (rack / "group_vars/all.yml").write_text("---\n" + yaml.safe_dump(data))
    f = tree / "roles/nvidia_driver/defaults/main.yml"
    f.write_text(f.read_text().replace('nvidia_driver_version: "580.159.04-1"',
                                       'nvidia_driver_version: "580.300.02-1"'))
    monkeypatch.setattr(offline_manifest, "PROJECT_ROOT", tree)
    m = manifest(rack, "stage01")
    assert "iperf3" in m.packages
    assert "doca-ofed" not in m.packages  # the inbox stack comes from the distribution
    assert pinned(m)["nvidia-open"] == "580.300.02-1"


def _vars(**over):
    base = {"nvidia_driver_version": "580.1.2-1", "fabric_manager_package_revision": "-1",
            "nvidia_driver_packages": ["nvidia-open"], "fabric_manager_packages": ["fm"],
            "cuda_toolkit_version": "12.8", "cuda_toolkit_package_version": "12.8.1-1",
            "__cuda_toolkit_package": "cuda-toolkit-12-8", "nccl_packages": ["libnccl2"],
            "__nccl_package_version": "2.27.3-1+cuda12.8", "dcgm_version": "1:4.2.0-1",
            "dcgm_cuda_major": 0, "__dcgm_core_package": "dcgm-core",
            "__dcgm_cuda_package_prefix": "dcgm-cuda", "rdma_network_stack": "doca",
            "rdma_network_doca_packages": ["doca-ofed"], "rdma_network_tools_packages": [],
            "os_baseline_packages": [], "nvme_raid_tool_packages": [],
            "__nvme_raid_packages": [], "validation_tools_packages": ["fio"],
            "__validation_tools_python_packages": [],
            "validation_tools_nccl_tests_version": "2.18.0",
            "validation_tools_nccl_tests_package": "",
            "offline_bundle_extra_packages": ["fio", "site-tool"],
            "__validation_tools_build_packages": ["build-essential"],
            "offline_bundle_nccl_tests_source_url": "https://x/v2.18.0.tar.gz",
            "__validation_tools_nccl_tests_tarball": "nccl-tests-2.18.0.tar.gz",
            "nvidia_driver_install_headers": True, "offline_bundle_node_kernels": [],
            "__nvidia_driver_headers_prefix": "linux-headers-"}
    return {**base, **over}.__getitem__


def test_dcgm_flavour_follows_the_toolkit_unless_pinned():
    assert "dcgm-cuda12=1:4.2.0-1" in from_vars(_vars()).packages
    assert "dcgm-cuda13=1:4.2.0-1" in from_vars(_vars(dcgm_cuda_major=13)).packages
    m = from_vars(_vars())
    assert m.packages.count("fio") == 1 and "site-tool" in m.packages  # extras, once


def test_the_bundle_carries_the_headers_of_the_nodes_kernels(rack: Path):
    # the inventory lists the nodes' kernels: their headers, named as nvidia_driver does
    set_group_var(rack, "staging", offline_bundle_node_kernels=["6.1.0-37-amd64",
                                                                "6.8.0-79-generic"])
    m = manifest(rack, "stage01")
    assert "linux-headers-6.1.0-37-amd64" in m.packages
    assert "linux-headers-6.8.0-79-generic" in m.packages
    prefix = yaml.safe_load((ROLES / "nvidia_driver/vars/main.yml").read_text())[
        "__nvidia_driver_headers_prefix"]
    assert prefix == "linux-headers-"
    assert _template(yaml.safe_load((ROLES / "nvidia_driver/vars/main.yml").read_text())[
        "__nvidia_driver_headers_package"], __nvidia_driver_headers_prefix=prefix,
        ansible_facts={"kernel": "6.1.0-37-amd64"}) == "linux-headers-6.1.0-37-amd64"


def test_without_listed_kernels_the_bundle_carries_the_staging_hosts():
    m = from_vars(_vars())
    headers = [p for p in m.packages if p.startswith("linux-headers-")]
    assert headers == ["linux-headers-" + offline_manifest.KERNEL_FACT]
    # templated on the staging host from its facts, as the role's download task sees it
    assert _template(headers[0], ansible_facts={"kernel": "6.1.0-37-amd64"}) == \
        "linux-headers-6.1.0-37-amd64"
    assert not [p for p in from_vars(_vars(nvidia_driver_install_headers=False)).packages
                if p.startswith("linux-headers-")]
    with pytest.raises(UserError, match="not a kernel release"):
        from_vars(_vars(offline_bundle_node_kernels=["6.1; rm -rf /"]))


def test_invoke_bundle_hands_the_manifest_to_the_role(rack: Path, monkeypatch):
    seen = {}
    monkeypatch.setattr(provision, "run_playbook",
                        lambda inv, book, **kw: seen.update(book=book, **kw))
    provision.build_bundle(rack, key_id="ABCD", quiet=True)
    m = manifest(rack, "stage01")
    assert seen["book"] == "offline_bundle.yml"
    assert seen["extravars"]["offline_bundle_packages"] == list(m.packages)
    assert seen["extravars"]["offline_bundle_sources"] == [
        {"url": s.url, "dest": s.dest} for s in m.sources]
    assert seen["extravars"]["offline_bundle_gpg_key_id"] == "ABCD"


def test_the_bundle_role_pins_no_version_of_its_own():
    text = (ROLES / "offline_bundle/defaults/main.yml").read_text()
    data = yaml.safe_load(text)
    assert data["offline_bundle_packages"] == [] and data["offline_bundle_sources"] == []
    for role in ("nvidia_driver", "cuda_toolkit", "nccl", "dcgm"):
        for name, value in yaml.safe_load((ROLES / role / "defaults/main.yml").read_text()
                                          ).items():
            if name.endswith("version") and isinstance(value, str) and "." in value:
                assert value not in text, (name, value)
    tasks = yaml.safe_load((ROLES / "offline_bundle/tasks/main.yml").read_text())
    fetch = next(t for t in tasks if "ansible.builtin.get_url" in t)
    assert fetch["loop"] == "{{ offline_bundle_sources }}"
    assert fetch["ansible.builtin.get_url"]["dest"].startswith("{{ offline_bundle_dir }}/src/")
    refuse = next(t for t in tasks if "ansible.builtin.assert" in t
                  and "offline_bundle_packages" in str(t["ansible.builtin.assert"]["that"]))
    assert "invoke bundle" in refuse["ansible.builtin.assert"]["fail_msg"]


# --- validation_tools: nccl-tests keyed on the pinned release

def _nccl_tasks() -> tuple[dict, list[dict]]:
    tasks = yaml.safe_load((ROLES / "validation_tools/tasks/nccl_tests.yml").read_text())
    build = next(t for t in tasks if t["name"] == "Build nccl-tests for this GPU")
    return next(t for t in tasks if "ansible.builtin.apt" in t), build["block"]


def _template(text: str, **variables):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    return Templar(loader=DataLoader(), variables=variables).template(text)


@pytest.mark.parametrize(("stamp", "rebuild"), [
    ("2.19.6\n", False), ("2.19.5\n", True), (None, True), ("", True)])
def test_the_build_is_keyed_on_its_version_stamp(stamp, rebuild):
    _, block = _nccl_tasks()
    names = [t["name"] for t in block]
    read = next(t for t in block if "ansible.builtin.slurp" in t)
    remove = next(t for t in block if t.get("ansible.builtin.file", {}).get("state") == "absent")
    write = next(t for t in block if "ansible.builtin.copy" in t)
    stamp_path = "{{ __validation_tools_nccl_tests_stamp }}"
    assert read["ansible.builtin.slurp"]["src"] == write["ansible.builtin.copy"]["dest"] == \
        stamp_path
    assert remove["ansible.builtin.file"]["path"] == "{{ validation_tools_nccl_tests_dir }}"
    assert read.get("check_mode") is False  # the comparison holds in --check too
    # read, remove, then unpack and build (both `creates:`), then stamp
    unpack = names.index("Unpack the nccl-tests source")
    make = names.index("Build nccl-tests")
    assert names.index(read["name"]) < names.index(remove["name"]) < unpack < make \
        < names.index(write["name"])
    assert write["ansible.builtin.copy"]["content"].startswith(
        "{{ validation_tools_nccl_tests_version }}")
    stamp_dir = yaml.safe_load((ROLES / "validation_tools/vars/main.yml").read_text())[
        "__validation_tools_nccl_tests_stamp"]
    assert stamp_dir.startswith("{{ validation_tools_nccl_tests_dir }}/")
    result = {"failed": True} if stamp is None else {
        "content": base64.b64encode(stamp.encode()).decode()}
    assert _template("{{ " + remove["when"] + " }}", validation_tools_register_stamp=result,
                     validation_tools_nccl_tests_version="2.19.6") is rebuild


def test_the_prebuilt_package_is_pinned_to_the_release():
    apt, _ = _nccl_tasks()
    name = _template(apt["ansible.builtin.apt"]["name"],
                     validation_tools_nccl_tests_package="nccl-tests",
                     validation_tools_nccl_tests_version="2.19.6")
    assert name == "nccl-tests=2.19.6-*"
    assert fnmatch(hwsim_packages.NCCL_TESTS, name.split("=", 1)[1])
    assert not fnmatch("2.18.0-1", name.split("=", 1)[1])
    assert apt["ansible.builtin.apt"]["allow_downgrade"] is True  # an older pin replaces it


def test_the_bundle_roles_defaults_template_with_what_invoke_bundle_passes(rack: Path) -> None:
    # the staging play runs only offline_bundle: every default of that role must template
    # from the role's own defaults plus the manifest's extravars (ansible validates the
    # argument spec against them before the first task)
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    defaults = yaml.safe_load((ROLES / "offline_bundle/defaults/main.yml").read_text())
    extra = manifest(rack, "stage01").extravars()
    templar = Templar(loader=DataLoader(), variables={**defaults, **extra})
    for value in defaults.values():
        templar.template(value, fail_on_undefined=True)  # raises on an undefined variable
    assert extra["validation_tools_nccl_tests_version"] == default(
        "validation_tools", "validation_tools_nccl_tests_version")
