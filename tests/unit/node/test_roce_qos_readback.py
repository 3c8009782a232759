"""RoCE as NCCL uses it: what rdma_network set, read back on the node.

Parsers on the tools' documented layouts (MFT `mlxconfig q` / `-e q`, mlnx-tools
`mlnx_qos -i`), then `network.roce_qos` and `network.peermem` on a hwsim node (its
stand-in mlnx_qos, mlxconfig and sysfs, provisioned as the role leaves it): healthy passes,
each QoS fault fails naming the NIC, its netdev and the priority (or the DSCP); the NCCL
environment every workload, the rack step and the launch snippets get."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fault_expectations import naming_failures
from test_probes_rdma import MLNX_QOS

from rackready.site.inventory import provisioned
from rackready.site.paths import PROJECT_ROOT
from rackready_lab.hwsim.faults import apply_fault, heal
from rackready_lab.hwsim.state import build_state
from rackready_lab.hwsim.sysroot import locked_node_state, read_node_state, write_node_state
from validation.checks.catalog import all_checks
from validation.checks.registry import CheckSkipped, Context
from validation.judge import judge
from validation.launch_map import LaunchMap, RankBinding, slurm_line, torchrun_wrapper
from validation.model import CheckResult
from validation.probes import rdma
from validation.profile import ProfileError, load_profile, with_site
from validation.workloads.common_env import nccl_ib_tc, roce_env

ROOT = PROJECT_ROOT

# `mlxconfig -d 0000:1a:00.0 q` (MFT 4.x): the Next Boot column alone; a '*' row starts
# the line (its next-boot value differs from the default)
MLX_Q = """
Device #1:
----------

Device type:        ConnectX7
Name:               MCX75310AAS-NEA_Ax
Description:        NVIDIA ConnectX-7 HHHL Adapter Card
Device:             0000:1a:00.0

Configurations:                                      Next Boot
*       LINK_TYPE_P1                                ETH(2)
        SRIOV_EN                                    False(0)
        NUM_OF_VFS                                  0
The '*' shows parameters with next value different from default/current value.
"""
# `mlxconfig -d 0000:1a:00.0 -e q LINK_TYPE_P1 ATS_ENABLED`: Default, Current, Next Boot
MLX_EQ = """
Device #1:
----------

Device type:        ConnectX7
Device:             0000:1a:00.0

Configurations:                              Default         Current         Next Boot
*       LINK_TYPE_P1                                IB(1)               ETH(2)              ETH(2)
*       ATS_ENABLED                                 False(0)            False(0)            True(1)
The '*' shows parameters with next value different from default/current value.
"""
# DSCP 26 moved from priority 3 to 0: mlnx_qos lists it under its new priority
MLNX_QOS_DRIFT = MLNX_QOS.replace("prio:0 dscp:07", "prio:0 dscp:26,07").replace(
    "27,26,25", "27,25")


def test_mlxconfig_plain_and_verbose_layouts():
    assert rdma.parse_mlxconfig(MLX_Q) == {"LINK_TYPE_P1": "ETH(2)", "SRIOV_EN": "False(0)",
                                           "NUM_OF_VFS": "0"}
    cols = rdma.parse_mlxconfig_columns(MLX_EQ)
    assert cols["ATS_ENABLED"] == {"Default": "False(0)", "Current": "False(0)",
                                   "Next Boot": "True(1)"}
    # the value in effect is Current, not the first column (Default)
    assert rdma.parse_mlxconfig(MLX_EQ)["LINK_TYPE_P1"] == "ETH(2)"
    assert [rdma.mlxconfig_number(v) for v in ("ETH(2)", "True(1)", "8", "per_mkey(0)", "x")] \
        == [2, 1, 8, 0, None]


def test_mlnx_qos_dscp2prio_map():
    qos = rdma.parse_mlnx_qos(MLNX_QOS_DRIFT)
    assert qos.dscp2prio[26] == 0 and qos.dscp2prio[27] == 3 and qos.dscp2prio[0] == 0
    assert qos.pfc_enabled == (3,) and qos.trust == "dscp"


class HwsimContext(Context):
    """Probe commands answered by hwsim's stand-in tools for this node's state."""

    state_file: Path

    def run(self, cmd, timeout_s=60, artifact=None, ok_codes=(0,)):
        if cmd[0] not in ("ibstat", "mlnx_qos", "mlxconfig"):
            raise CheckSkipped(f"{cmd[0]} not found on this node")
        p = subprocess.run([sys.executable, "-m", f"rackready_lab.hwsim.cli.{cmd[0]}", *cmd[1:]],
                           capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "HWSIM_STATE": str(self.state_file),
                                "PYTHONPATH": str(ROOT)})
        assert p.returncode == 0, p.stderr
        return p.stdout


def site() -> dict:
    return {"fabric": "roce", **provisioned({}, Path("roles"))}


def node_ctx(tmp_path: Path, state: dict) -> HwsimContext:
    write_node_state(state, tmp_path / "node")
    prof = with_site(load_profile("xe9680-h200"), site())
    ctx = HwsimContext(profile=prof, level="quick",
                       sysroot=tmp_path / "node/var/lib/hwsim/root", out=tmp_path / "out")
    ctx.state_file = tmp_path / "node/var/lib/hwsim/state.json"
    ctx.site = {**site(), "rdma_devices": [n["bdf"] for n in state["nics"]
                                           if n["role"] == "compute"]}
    return ctx


def judged(ctx: Context, name: str = "network.roce_qos"):
    spec = all_checks()[name]
    result = CheckResult(name, "ok", 0.0, tuple(spec.fn(ctx)), "", spec.needs)
    return result, judge([result], ctx.profile)


def healthy() -> dict:
    return build_state("xe9680-h200", "gpu01", "roce", provisioned=True)


def test_healthy_node_reads_back_every_setting_the_role_made(tmp_path):
    result, verdicts = judged(node_ctx(tmp_path, healthy()))
    assert [v.message for v in verdicts if v.outcome == "fail"] == []
    passed = {v.metric for v in verdicts if v.outcome == "pass"}
    assert {"roce.ecn_np_enabled", "roce.ecn_rp_enabled", "roce.dscp_priority",
            "roce.pfc_priority_enabled", "nic.mlxconfig", "nic.mlxconfig_pending"} <= passed
    ecn = [v for v in verdicts if v.metric == "roce.ecn_np_enabled"]
    assert len(ecn) == 8 and {v.labels["priority"] for v in ecn} == {"3"}
    # the NCCL settings the run's workloads get are in the record
    got = {m.name: m.value for m in result.measurements if m.name.startswith("nccl.")}
    assert got == {"nccl.ib_tc": 104, "nccl.ib_gid_index": 3}


@pytest.mark.parametrize("kind", ["ecn-off", "dscp-map-drift"])
def test_qos_faults_fail_naming_the_nic_netdev_and_priority(tmp_path, kind):
    state = apply_fault(healthy(), kind, "mlx5_2")
    comp = state["faults"][-1]["component"]
    _, verdicts = judged(node_ctx(tmp_path, state))
    bad = [v.to_dict() for v in verdicts if v.outcome == "fail"]
    assert bad and all(v["labels"]["nic"] == "mlx5_2" for v in bad), bad
    assert naming_failures([{**v, "check": "network.roce_qos"} for v in bad], kind, comp)
    # heal puts the NIC's settings back (they are run-time settings heal otherwise keeps)
    tmp2 = tmp_path / "healed"
    _, verdicts = judged(node_ctx(tmp2, heal(state)))
    assert [v.message for v in verdicts if v.outcome == "fail"] == []


def test_firmware_drift_and_pending_reboot_fail_naming_the_nic(tmp_path):
    state = healthy()
    cfg = state["nic_config"]["mlx5_1"]["mlxconfig"]
    cfg["current"]["LINK_TYPE_P1"] = "IB(1)"  # the port runs InfiniBand on a RoCE node
    state["nic_config"]["mlx5_4"]["mlxconfig"]["pending"]["ATS_ENABLED"] = "True(1)"
    ctx = node_ctx(tmp_path, state)
    ctx.site["rdma_network_mlxconfig"] = {"ATS_ENABLED": 1}
    ctx.profile = with_site(load_profile("xe9680-h200"), ctx.site)
    _, verdicts = judged(ctx)
    bad = {(v.metric, v.labels["nic"], v.labels.get("param")) for v in verdicts
           if v.outcome == "fail"}
    # ATS_ENABLED is off in effect everywhere (the site wants it on); mlx5_4's waits a reboot
    assert ("nic.mlxconfig", "mlx5_1", "LINK_TYPE_P1") in bad
    assert ("nic.mlxconfig_pending", "mlx5_4", None) in bad
    assert {n for m, n, p in bad if p == "ATS_ENABLED"} == {f"mlx5_{i}" for i in range(8)}
    msg = next(v for v in verdicts if v.outcome == "fail" and v.labels.get("param") ==
               "LINK_TYPE_P1")
    assert "NIC mlx5_1" in msg.message and "firmware setting LINK_TYPE_P1" in msg.message


def test_ecn_written_by_the_role_survives_the_next_render(tmp_path):
    # the role's QoS script writes the sysfs enable; hwsim keeps it as the kernel does
    state = healthy()
    nic = state["nics"][0]
    state["nic_config"][nic["name"]]["qos"]["ecn"] = [0] * 8
    state["nic_config"][nic["name"]]["qos"]["ecn_rp"] = [0] * 8
    node = tmp_path / "node"
    write_node_state(state, node)
    f = node / "var/lib/hwsim/root/sys/class/net" / nic["netdev"] / "ecn/roce_np/enable/3"
    assert f.read_text() == "0\n"
    f.write_text("1\n")
    with locked_node_state(node):  # any later change re-renders the sysroot
        pass
    assert f.read_text() == "1\n"
    assert read_node_state(node)["nic_config"][nic["name"]]["qos"]["ecn"][3] == 1


def test_peermem_bound_to_the_loaded_ib_core(tmp_path):
    state = healthy()
    ctx = node_ctx(tmp_path, state)
    _, verdicts = judged(ctx, "network.peermem")
    linked = [v for v in verdicts if v.metric == "peermem.ib_core_linked"]
    assert [v.outcome for v in linked] == ["pass"]
    # a peermem loaded without ib_core listing it as a user: not bound to this ib_core
    mods = ctx.sysroot / "proc/modules"
    mods.write_text("\n".join(ln.replace("nvidia_peermem,", "") if ln.startswith("ib_core")
                              else ln for ln in mods.read_text().splitlines()) + "\n")
    _, verdicts = judged(ctx, "network.peermem")
    bad = [v for v in verdicts if v.outcome == "fail"]
    assert [v.metric for v in bad] == ["peermem.ib_core_linked"]
    assert "rebuild the NVIDIA DKMS modules" in bad[0].remediation
    # where modinfo cannot say which file is installed, srcversion is not judged at all
    assert [v.outcome for v in verdicts if v.metric == "kernel.module_current"] in \
        ([], ["not_applicable"])


def test_nccl_env_from_the_site_values():
    assert nccl_ib_tc(26) == 104 and nccl_ib_tc(46) == 184
    assert roce_env(site()) == {"NCCL_IB_TC": "104", "NCCL_IB_GID_INDEX": "3"}
    assert roce_env({**site(), "rdma_network_roce_dscp": 24,
                     "rdma_network_roce_gid_index": 1}) == {"NCCL_IB_TC": "96",
                                                            "NCCL_IB_GID_INDEX": "1"}
    assert roce_env({**site(), "fabric": "ib"}) == {}
    with pytest.raises(ProfileError, match="0..63"):
        with_site(load_profile("xe9680-h200"), {**site(), "rdma_network_roce_dscp": 64})


def test_rack_step_gets_the_same_nccl_env(tmp_path):
    from rackready.site import inventory
    from rackready.steps import validate

    for host in ("gpu02", "gpu01"):
        node = inventory.find(host, str(ROOT / "inventories" / "rack1"))
        env = validate._nccl_env(node)
        if node.fabric == "roce":
            assert env["NCCL_IB_TC"] == "104" and env["NCCL_IB_GID_INDEX"] == "3"
        else:
            assert "NCCL_IB_TC" not in env and "NCCL_IB_GID_INDEX" not in env


def test_launch_snippets_export_the_roce_settings():
    lm = LaunchMap((RankBinding(0, 0, "0000:19:00.0", "S0", "mlx5_0", "PIX", 0, (0, 1)),))
    env = roce_env(site())
    wrapper = torchrun_wrapper(lm, env)
    assert "export NCCL_IB_GID_INDEX=3 NCCL_IB_TC=104" in wrapper
    assert "./bind.sh" in slurm_line(lm)  # srun runs the same wrapper, with its exports
    assert "NCCL_IB_TC" not in torchrun_wrapper(lm)  # InfiniBand: none
    with pytest.raises(ValueError):
        torchrun_wrapper(lm, {"NCCL_IB_TC": "104; rm -rf /"})
