"""hwsim state generation: counts, topology, uniqueness, provenance (from the real capture)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rackready_lab.hwsim.state import PlatformError, build_state
from rackready_lab.hwsim.topology import PLATFORMS

CAPTURE = Path(__file__).resolve().parents[2] / "fixtures" / "hgx-h200-2gpu"


@pytest.mark.parametrize("platform", list(PLATFORMS))
def test_counts_and_numa_pairing(platform: str) -> None:
    s = build_state(platform, "gpu01")
    assert s["simulated"] is True and s["provenance"]["capture"] == "hgx-h200-2gpu"
    assert len(s["gpus"]) == 8
    compute = [n for n in s["nics"] if n["role"] == "compute"]
    xe = platform.startswith("xe9680")
    # XE9680: a ConnectX-7 per GPU + 2 storage; DL380a: one per GPU pair (the rack1 order)
    assert len(compute) == (8 if xe else 4)
    assert len(s["nics"]) == (10 if xe else 4)
    assert [d["role"] for d in s["nvme"]].count("data") == 8
    assert [d["role"] for d in s["nvme"]].count("os") == 1
    for socket in (0, 1):  # 4 GPUs per socket, its compute NICs beside its GPUs
        assert sum(g["numa"] == socket for g in s["gpus"]) == 4
        assert sum(n["numa"] == socket for n in compute) == len(compute) // 2
    for n in compute:
        assert s["gpus"][n["gpu"]]["numa"] == n["numa"]


def test_driver_and_link_speed_come_from_the_capture() -> None:
    root = ET.parse(CAPTURE / "nvidia-smi-q-x.xml").getroot()
    s = build_state("xe9680-h200", "gpu01")
    assert s["driver"]["version"] == root.findtext("driver_version") == "580.159.04"
    assert s["driver"]["cuda"] == root.findtext("cuda_version")
    speed = (CAPTURE / "nvidia-smi-nvlink-s.txt").read_text().split("Link 0: ")[1].split()[0]
    assert all(link["gbps"] == float(speed) for g in s["gpus"] for link in g["nvlinks"])


def test_hgx_wiring_18_links_through_4_nvswitches() -> None:
    s = build_state("xe9680-h100", "gpu01")
    assert len(s["nvswitches"]) == 4
    for g in s["gpus"]:
        assert len(g["nvlinks"]) == 18
        assert {link["peer"] for link in g["nvlinks"]} == {f"nvswitch:{i}" for i in range(4)}
        assert g["fabric"]["state"] == "Completed"


def test_nvl_bridges_groups_of_four_and_pairs() -> None:
    gen12 = build_state("dl380a-gen12-h200nvl", "n1")
    assert not gen12["nvswitches"]
    peers = {link["peer"] for link in gen12["gpus"][5]["nvlinks"]}
    assert peers == {"gpu:4", "gpu:6", "gpu:7"}
    gen11 = build_state("dl380a-gen11-h100nvl", "n1")
    assert {link["peer"] for link in gen11["gpus"][2]["nvlinks"]} == {"gpu:3"}


def test_identities_unique_per_gpu_and_node_and_deterministic() -> None:
    a, b = build_state("xe9680-h200", "gpu01"), build_state("xe9680-h200", "gpu02")
    for key in ("serial", "uuid", "bdf"):
        assert len({g[key] for g in a["gpus"]}) == 8
    assert not {g["serial"] for g in a["gpus"]} & {g["serial"] for g in b["gpus"]}
    assert not {g["uuid"] for g in a["gpus"]} & {g["uuid"] for g in b["gpus"]}
    assert not {n["node_guid"] for n in a["nics"]} & {n["node_guid"] for n in b["nics"]}
    assert build_state("xe9680-h200", "gpu01") == a


def test_fabric_sets_link_layer_and_roce_qos() -> None:
    ib = build_state("xe9680-h200", "g", fabric="ib")
    roce = build_state("xe9680-h200", "g", fabric="roce")
    assert {n["link_layer"] for n in ib["nics"] if n["role"] == "compute"} == {"InfiniBand"}
    assert {n["link_layer"] for n in roce["nics"]} == {"Ethernet"}
    qos = roce["nic_config"]["mlx5_0"]["qos"]
    assert qos["trust"] == "dscp" and qos["pfc"][3] == 1 and qos["mtu"] == 9000


def test_fresh_os_has_no_driver_loaded() -> None:
    s = build_state("xe9680-h200", "g", provisioned=False)
    assert "nvidia" not in s["modules"] and not s["raid"]["assembled"]
    assert not any(v["running"] for v in s["services"].values())


def test_unknown_platform_or_fabric_is_one_line_error() -> None:
    with pytest.raises(PlatformError, match="valid: xe9680-h200"):
        build_state("dgx-b200", "g")
    with pytest.raises(PlatformError, match="unknown fabric"):
        build_state("xe9680-h200", "g", fabric="opa")
