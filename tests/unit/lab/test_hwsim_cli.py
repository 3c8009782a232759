"""hwsim node-side tools run as subprocesses against a temp state (HWSIM_STATE).

Formats are checked against the real capture (tests/fixtures/hgx-h200-2gpu) where it
has the tool; ibstat, ibv_devinfo, mlxconfig, nvme, lspci and dcgmi are not in the
capture, so those are checked against the tools' documented layouts.
Faulted states are generated in code from the capture-based state (apply_fault).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rackready.site.paths import PROJECT_ROOT
from rackready_lab.hwsim.faults import apply_fault
from rackready_lab.hwsim.state import build_state
from rackready_lab.hwsim.sysroot import write_node_state

REPO = PROJECT_ROOT
CAPTURE = Path(__file__).resolve().parents[2] / "fixtures" / "hgx-h200-2gpu"


def tool(node: Path, name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, HWSIM_STATE=str(node / "var/lib/hwsim/state.json"),
               HWSIM_MODULES_DIR=str(node / "modules.d"))
    return subprocess.run([sys.executable, "-m", f"rackready_lab.hwsim.{name}", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, input=stdin)


def node_with(tmp_path: Path, state: dict) -> Path:
    write_node_state(state, tmp_path)
    return tmp_path


@pytest.fixture()
def xe(tmp_path: Path) -> Path:
    return node_with(tmp_path, build_state("xe9680-h200", "gpu01"))


def smi(node: Path, *args: str) -> subprocess.CompletedProcess:
    return tool(node, "cli.nvidia_smi", *args)


def test_xml_clones_capture_per_gpu(xe: Path) -> None:
    r = smi(xe, "-q", "-x")
    assert r.returncode == 0, r.stderr
    root = ET.fromstring(r.stdout.split("\n", 2)[2])
    gpus = root.findall("gpu")
    assert len(gpus) == 8 and root.findtext("attached_gpus") == "8"
    state = json.loads((xe / "var/lib/hwsim/state.json").read_text())
    assert [g.findtext("serial") for g in gpus] == [g["serial"] for g in state["gpus"]]
    cap = ET.parse(CAPTURE / "nvidia-smi-q-x.xml").getroot().find("gpu")
    # same element tree as the real tool's, only values differ
    assert [e.tag for e in gpus[7].iter()] == [e.tag for e in cap.iter()]
    assert gpus[0].findtext("fabric/state") == "Completed"


def test_text_q_and_performance_keep_capture_layout(xe: Path) -> None:
    full = smi(xe, "-q").stdout.split("\n")
    cap = (CAPTURE / "nvidia-smi-q.txt").read_text().split("\n")
    cap_block = cap.index("GPU 00000000:00:07.0") - cap.index("GPU 00000000:00:06.0")
    starts = [i for i, line in enumerate(full) if line.startswith("GPU 0000")]
    assert len(starts) == 8 and starts[1] - starts[0] == cap_block
    perf = smi(xe, "-q", "-d", "PERFORMANCE", "-i", "0").stdout.split("\n")
    cap_perf = (CAPTURE / "nvidia-smi-q-performance.txt").read_text().split("\n")
    skip = ("Timestamp", "Attached GPUs", "GPU 0000", "        SW Power Capping")
    one_gpu = cap_perf[: cap_perf.index("GPU 00000000:00:07.0")]  # header + first GPU
    assert [ln for ln in perf if not ln.startswith(skip)][:-1] == \
        [ln for ln in one_gpu if not ln.startswith(skip)]


def test_query_gpu_with_capture_fields(xe: Path) -> None:
    cap = (CAPTURE / "nvidia-smi-query-gpu.csv").read_text().splitlines()
    fields = ",".join(h.split(" [")[0] for h in cap[0].split(", "))
    r = smi(xe, f"--query-gpu={fields}", "--format=csv")
    lines = r.stdout.splitlines()
    assert lines[0] == cap[0] and len(lines) == 9
    assert all(len(row.split(", ")) == len(cap[1].split(", ")) for row in lines[1:])
    # the capture's values for the fields the state does not vary
    assert lines[1].split(", ")[5:] [:4] == cap[1].split(", ")[5:][:4]
    r = smi(xe, "--query-gpu=memory.total,power.limit", "--format=csv,noheader,nounits")
    assert r.stdout.splitlines()[0] == "143771, 700.00"
    cap = (CAPTURE / "nvidia-smi-remapped-rows.csv").read_text().splitlines()
    r = smi(xe, "--query-remapped-rows=" + cap[0].replace(", ", ","), "--format=csv")
    assert r.stdout.splitlines()[0] == cap[0] and r.stdout.count("No, No") == 8


def _matrix(out: str, n: int) -> list[list[str]]:
    return [line.split("\t")[1: n + 1] for line in out.splitlines()[1: n + 1]]


def test_topo_nv18_everywhere_on_hgx(xe: Path) -> None:
    m = _matrix(smi(xe, "topo", "-m").stdout, 8)
    assert all(c == "NV18" for i, row in enumerate(m) for j, c in enumerate(row) if i != j)


def test_topo_groups_on_dl380a(tmp_path: Path) -> None:
    node = node_with(tmp_path, build_state("dl380a-gen12-h200nvl", "n1"))
    m = _matrix(smi(node, "topo", "-m").stdout, 8)
    assert m[0][1:4] == ["NV6"] * 3 and m[0][4:] == ["SYS"] * 4 and m[5][4] == "NV6"


def test_nvlink_down_shows_in_status_and_topo(tmp_path: Path) -> None:
    node = node_with(tmp_path, apply_fault(build_state("xe9680-h200", "g"), "nvlink-down",
                                           "2:5"))
    s = smi(node, "nvlink", "-s", "-i", "2").stdout
    assert "Link 5: <inactive>" in s and s.count("GB/s") == 17
    m = _matrix(smi(node, "topo", "-m").stdout, 8)
    assert m[2][0] == "NV17" and m[0][1] == "NV18"


def test_pcie_downtrain_in_csv_sysfs_and_lspci(tmp_path: Path) -> None:
    state = apply_fault(build_state("xe9680-h200", "g"), "pcie-downtrained", "1")
    node = node_with(tmp_path, state)
    row = smi(node, "--query-gpu=pcie.link.gen.current,pcie.link.width.current",
              "--format=csv,noheader", "-i", "1").stdout.strip()
    assert row == "4, 8"
    bdf = state["gpus"][1]["bdf"]
    sysfs = node / "var/lib/hwsim/root/sys/bus/pci/devices" / bdf
    assert (sysfs / "current_link_width").read_text() == "8\n"
    assert (sysfs / "current_link_speed").read_text() == "16.0 GT/s PCIe\n"
    lspci = tool(node, "cli.lspci", "-vvv", "-s", bdf[5:]).stdout
    assert "LnkSta:\tSpeed 16GT/s (downgraded), Width x8 (downgraded)" in lspci


def test_gpu_missing_and_xid79(tmp_path: Path) -> None:
    base = build_state("xe9680-h200", "g")
    node = node_with(tmp_path / "a", apply_fault(base, "gpu-missing", "4"))
    assert smi(node, "-q", "-x").stdout.count("<gpu id=") == 7
    assert base["gpus"][4]["bdf"] not in tool(node, "cli.lspci", "-D").stdout
    node = node_with(tmp_path / "b", apply_fault(base, "xid-79", "6"))
    r = smi(node, "-L")
    assert r.returncode == 15 and len(r.stdout.splitlines()) == 7
    assert "00000000:CB:00.0" in r.stderr
    kern = (node / "var/lib/hwsim/root/var/log/kern.log").read_text()
    assert "NVRM: Xid (PCI:0000:cb:00): 79," in kern


def test_ecc_thermal_remap_and_fabric(tmp_path: Path) -> None:
    s = build_state("xe9680-h200", "g")
    for k in ("ecc-uncorrectable", "thermal-throttle", "row-remap-pending"):
        s = apply_fault(s, k, "3")
    s = apply_fault(s, "fabric-manager-down")
    node = node_with(tmp_path, s)
    row = smi(node, "--query-gpu=ecc.errors.uncorrected.volatile.total,"
              "clocks_event_reasons.active,remapped_rows.pending,temperature.gpu",
              "--format=csv,noheader", "-i", "3").stdout.strip()
    assert row == "1, 0x0000000000000068, Yes, 92"
    xml = ET.fromstring(smi(node, "-q", "-x").stdout.split("\n", 2)[2])
    assert {g.findtext("fabric/state") for g in xml.findall("gpu")} == {"In Progress"}
    diag = tool(node, "cli.dcgmi", "diag", "-r", "3")
    assert diag.returncode != 0 and "| memory                    | Fail - GPUs: 3" in diag.stdout


def test_nic_and_nvme_faults(tmp_path: Path) -> None:
    s = apply_fault(build_state("xe9680-h200", "g", fabric="ib"), "ib-port-down", "mlx5_3")
    s = apply_fault(s, "nvme-missing", "nvme2")
    node = node_with(tmp_path, s)
    out = tool(node, "cli.ibstat", "mlx5_3").stdout
    assert "State: Down" in out and "Link layer: InfiniBand" in out
    devices = json.loads(tool(node, "cli.nvme", "list", "-o", "json").stdout)["Devices"]
    assert len(devices) == 8 and "/dev/nvme2n1" not in {d["DevicePath"] for d in devices}
    assert "md0 : inactive" in (node / "var/lib/hwsim/root/proc/mdstat").read_text()


@pytest.mark.parametrize("name,args", [("cli.nvidia_smi", ["--bogus"]),
                                       ("cli.nvidia_smi", ["topo", "-x"]),
                                       ("cli.ibstat", ["-z"]), ("cli.lspci", ["-z"]),
                                       ("cli.nvme", ["frobnicate"]), ("cli.dcgmi", ["diag"]),
                                       ("cli.mlxconfig", ["q"]), ("cli.mlnx_qos", ["-x"])])
def test_unknown_flags_fail_with_one_line(xe: Path, name: str, args: list[str]) -> None:
    r = tool(xe, name, *args)
    assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.strip()


def test_missing_state_is_one_line(tmp_path: Path) -> None:
    r = tool(tmp_path, "cli.nvidia_smi", "-L")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no simulated" in r.stderr


def test_mlxconfig_set_is_pending_until_reboot(xe: Path) -> None:
    r = tool(xe, "cli.mlxconfig", "-d", "mlx5_0", "-y", "set", "LINK_TYPE_P1=IB")
    assert r.returncode == 0 and "Please reboot" in r.stdout
    q = tool(xe, "cli.mlxconfig", "-d", "mlx5_0", "-e", "q", "LINK_TYPE_P1").stdout
    assert "ETH(2)              IB(1)" in q  # current ETH, next boot IB (-e: every column)
    plain = tool(xe, "cli.mlxconfig", "-d", "mlx5_0", "q", "LINK_TYPE_P1").stdout
    assert "Next Boot" in plain and "Current" not in plain and plain.rstrip().endswith("IB(1)")
    assert "Link layer: Ethernet" in tool(xe, "cli.ibstat", "mlx5_0").stdout
    assert tool(xe, "cli.boot", "nic").returncode == 0
    assert "Link layer: InfiniBand" in tool(xe, "cli.ibstat", "mlx5_0").stdout


def test_mlnx_qos_set_and_reset_at_boot(tmp_path: Path) -> None:
    node = node_with(tmp_path, build_state("xe9680-h200", "g", provisioned=False))
    ifname = "ens26np0"
    assert "trust state: pcp" in tool(node, "cli.mlnx_qos", "-i", ifname).stdout
    r = tool(node, "cli.mlnx_qos", "-i", ifname, "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0")
    assert r.returncode == 0 and "enabled     0   0   0   1" in r.stdout
    assert "trust state: dscp" in tool(node, "cli.mlnx_qos", "-i", ifname).stdout
    tool(node, "cli.boot", "nic")
    assert "trust state: pcp" in tool(node, "cli.mlnx_qos", "-i", ifname).stdout


def test_modprobe_shim_and_driver_presence(tmp_path: Path) -> None:
    node = node_with(tmp_path, build_state("xe9680-h200", "g", provisioned=False))
    assert smi(node, "-L").returncode == 9  # no driver loaded yet
    r = tool(node, "cli.modprobe", "nvidia")
    assert r.returncode == 1 and "not found" in r.stderr  # driver package not installed
    (node / "modules.d").mkdir()
    (node / "modules.d/nvidia-kernel-open-dkms.list").write_text("nvidia nvidia_peermem\n")
    assert tool(node, "cli.modprobe", "nvidia_peermem").returncode == 0
    assert "nvidia_peermem" in (node / "var/lib/hwsim/root/proc/modules").read_text()
    assert smi(node, "-L").stdout.count("GPU ") == 8


def test_fabric_manager_refuses_version_mismatch(tmp_path: Path) -> None:
    node = node_with(tmp_path, build_state("xe9680-h200", "g", provisioned=False))
    r = tool(node, "services.daemon", "nvidia-fabricmanager", "--version", "580.126.09-1",
             "--once")
    assert r.returncode == 1 and "does not match" in r.stderr
    r = tool(node, "services.daemon", "nvidia-fabricmanager", "--version", "580.159.04-1",
             "--once")
    assert r.returncode == 0
    state = json.loads((node / "var/lib/hwsim/state.json").read_text())
    assert {g["fabric"]["state"] for g in state["gpus"]} == {"Completed"}
