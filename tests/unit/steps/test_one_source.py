"""One source of truth: a group_var moves provisioning and validation together.

Provisioning's side is read the way Ansible itself resolves it (a play with the roles,
its VariableManager, its templating); validation's side is the site file `invoke
validate` ships (rackready.steps.validate._site) and the limits the node derives from it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from rackready.site import inventory
from rackready.steps import validate
from validation.profile import load_profile, with_site

ROOT = Path(__file__).resolve().parents[2].parent


def ansible_effective(inv: Path, host: str) -> dict:
    """Every PROVISIONED_VARS value as a play running the roles would see it."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play import Play
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    init_plugin_loader()
    loader = DataLoader()
    im = InventoryManager(loader=loader, sources=[str(inv / "hosts.yml")])
    vm = VariableManager(loader=loader, inventory=im)
    roles = [str(ROOT / "roles" / r) for r in inventory.PROVISIONED_VARS]
    play = Play.load({"hosts": "all", "gather_facts": False, "roles": roles},
                     variable_manager=vm, loader=loader)
    hv = vm.get_vars(play=play, host=im.get_host(host))
    templar = Templar(loader=loader, variables=hv)
    return {n: templar.template(hv[n]) for names in inventory.PROVISIONED_VARS.values()
            for n in names}


@pytest.fixture()
def rack(tmp_path: Path) -> Path:
    inv = tmp_path / "rack"
    shutil.copytree(ROOT / "inventories" / "rack1", inv)
    return inv


def set_group_var(inv: Path, group: str, **values) -> None:
    f = inv / "group_vars" / f"{group}.yml"
    data = yaml.safe_load(f.read_text()) or {}
    f.write_text("---\n" + yaml.safe_dump({**data, **values}))


def site_of(inv: Path, host: str) -> dict:
    return validate._site(inventory.find(host, str(inv)))


def test_both_sides_agree_on_every_variable(rack: Path):
    for host in ("gpu01", "gpu02", "gpu05"):
        site = site_of(rack, host)
        for name, value in ansible_effective(rack, host).items():
            assert site[name] == value, name


def test_a_group_var_moves_provisioning_and_validation_together(rack: Path):
    before = site_of(rack, "gpu02")
    assert before["rdma_network_roce_priority"] == 3
    set_group_var(rack, "xe9680", rdma_network_roce_priority=5, rdma_network_roce_trust="pcp",
                  rdma_network_roce_mtu=1500, nccl_version="2.29.1-1",
                  validation_tools_nccl_tests_dir="/srv/nccl-tests",
                  validation_tools_venv="/srv/rr-venv")
    ansible = ansible_effective(rack, "gpu02")
    site = site_of(rack, "gpu02")
    for name in ("rdma_network_roce_priority", "rdma_network_roce_trust",
                 "rdma_network_roce_mtu", "nccl_version", "validation_tools_nccl_tests_dir",
                 "validation_tools_venv"):
        assert site[name] == ansible[name] != before[name], name
    # the node judges against the moved values
    prof = with_site(load_profile(inventory.find("gpu02", str(rack)).profile), site)
    pfc = prof.thresholds_for("roce.pfc_priority_enabled")
    assert [t.labels for t in pfc] == [{"priority": "5"}]
    assert [t.value for t in prof.thresholds_for("roce.trust")] == ["pcp"]
    assert [t.value for t in prof.thresholds_for("ib.active_mtu")] == [1024]
    assert {t.value for t in prof.thresholds_for("nccl.version")} == {"2.29.1"}
    assert {t.value for t in prof.thresholds_for("nccl.torch_version")} == {"2.29.1"}
    assert validate._venv(inventory.find("gpu02", str(rack))) == "/srv/rr-venv"
    # the other platform's group is untouched
    assert site_of(rack, "gpu06")["rdma_network_roce_priority"] == 3


def test_a_templated_variable_that_cannot_resolve_is_one_line(rack: Path):
    set_group_var(rack, "xe9680", rdma_network_roce_mtu="{{ no_such_variable }}")
    with pytest.raises(inventory.UserError, match="gpu0.*rdma_network_roce_mtu"):
        inventory.load(str(rack))


def test_gpu_modes_follow_the_driver_role(rack: Path):
    # ECC, MIG and persistence are what nvidia_driver set, judged under its own names
    prof = with_site(load_profile(inventory.find("gpu02", str(rack)).profile),
                     site_of(rack, "gpu02"))
    assert [t.value for t in prof.thresholds_for("gpu.mig_mode")] == ["Disabled"]
    set_group_var(rack, "xe9680", nvidia_driver_mig_enabled=True,
                  nvidia_driver_persistence_enabled=False)
    site = site_of(rack, "gpu02")
    assert site["nvidia_driver_mig_enabled"] is True
    prof = with_site(load_profile(inventory.find("gpu02", str(rack)).profile), site)
    assert [t.value for t in prof.thresholds_for("gpu.mig_mode")] == ["Enabled"]
    assert [t.value for t in prof.thresholds_for("gpu.persistence_mode")] == ["Disabled"]
    assert [t.value for t in prof.thresholds_for("gpu.ecc_mode")] == ["Enabled"]
    assert "nvidia_driver_mig_enabled" in prof.thresholds_for("gpu.mig_mode")[0].provenance


def test_the_roce_gid_index_moves_the_role_and_ib_write_bw_together(rack: Path):
    from validation.checks.rdma_perf import _cmd, gid_index

    before = site_of(rack, "gpu02")
    assert gid_index(before) == ansible_effective(rack, "gpu02")["rdma_network_roce_gid_index"]
    set_group_var(rack, "xe9680", rdma_network_roce_gid_index=5)
    site = site_of(rack, "gpu02")
    assert site["rdma_network_roce_gid_index"] == \
        ansible_effective(rack, "gpu02")["rdma_network_roce_gid_index"] == 5 \
        != before["rdma_network_roce_gid_index"]
    cmd = _cmd("mlx5_0", 0, 18515, 5, gid_index(site))
    assert cmd[cmd.index("-x") + 1] == "5"
    assert "-x" not in _cmd("mlx5_0", 0, 18515, 5, None)  # InfiniBand needs no GID
    # a site file without it is the controller's bug, said as such (no silent default)
    with pytest.raises(RuntimeError, match="rdma_network_roce_gid_index"):
        gid_index({k: v for k, v in site.items() if k != "rdma_network_roce_gid_index"})
    assert site_of(rack, "gpu06")["rdma_network_roce_gid_index"] == 3


def test_a_site_bios_override_is_what_the_out_of_band_step_expects(rack: Path):
    """The bios role applies the platform profile combined with bios_attributes_override;
    the out-of-band step must expect the same, or a site's choice reads as drift."""
    from rackready.steps import oob

    base, _ = oob.bios_profile(inventory.find("gpu01", str(rack)))
    name = next(iter(base))
    set_group_var(rack, "all", bios_attributes_override={name: "SiteChoice"})
    node = inventory.find("gpu01", str(rack))
    assert ansible_effective(rack, "gpu01")["bios_attributes_override"] == {name: "SiteChoice"}
    want, _ = oob.bios_profile(node)
    assert want[name] == "SiteChoice" and base[name] != "SiteChoice"
    assert {k: v for k, v in want.items() if k != name} == \
        {k: v for k, v in base.items() if k != name}
