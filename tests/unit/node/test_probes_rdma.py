"""RDMA tool parsers. None of these tools ran on the captured machine: the sample text
below follows the tools' documented output formats (infiniband-diags ibstat,
rdma-core ibv_devinfo, MFT mlxconfig, mlnx-tools mlnx_qos)."""

from __future__ import annotations

import pytest

from validation.probes import rdma
from validation.probes.nvidia_smi import ParseError

IBSTAT = """CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tHardware version: 0
\tNode GUID: 0xa088c20300ab0010
\tSystem image GUID: 0xa088c20300ab0010
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tBase lid: 12
\t\tLMC: 0
\t\tSM lid: 1
\t\tCapability mask: 0xa751e848
\t\tPort GUID: 0xa088c20300ab0010
\t\tLink layer: InfiniBand
CA 'mlx5_1'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tHardware version: 0
\tNode GUID: 0xa088c20300ab0011
\tSystem image GUID: 0xa088c20300ab0011
\tPort 1:
\t\tState: Down
\t\tPhysical state: Polling
\t\tRate: 10
\t\tBase lid: 65535
\t\tLMC: 0
\t\tSM lid: 0
\t\tCapability mask: 0xa751e848
\t\tPort GUID: 0xa088c20300ab0011
\t\tLink layer: InfiniBand
"""

IBV_DEVINFO = """hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tnode_guid:\t\t\ta088:c203:00ab:0010
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4129
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000838
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t2048 (4)
\t\t\tsm_lid:\t\t\t1
\t\t\tport_lid:\t\t12
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tInfiniBand
"""

MLXCONFIG = """
Device #1:
----------

Device type:        ConnectX7
Name:               MCX75310AAS-NEA_Ax
Description:        NVIDIA ConnectX-7 HHHL adapter card; 400Gb/s NDR IB
Device:             /dev/mst/mt4129_pciconf0

Configurations:                                          Next Boot
        MEMIC_BAR_SIZE                              0
        FLEX_PARSER_PROFILE_ENABLE                  0
        LINK_TYPE_P1                                IB(1)
        ADVANCED_PCI_SETTINGS                       True(1)
        ATS_ENABLED                                 False(0)
"""

MLNX_QOS = """DCBX mode: OS controlled
Priority trust state: dscp
dscp2prio mapping:
\tprio:0 dscp:07,06,05,04,03,02,01,00,
\tprio:3 dscp:31,30,29,28,27,26,25,24,
default priority:
Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,
Cable len: 7
PFC configuration:
\tpriority    0   1   2   3   4   5   6   7
\tenabled     0   0   0   1   0   0   0   0
\tbuffer      0   0   0   1   0   0   0   0
tc: 0 ratelimit: unlimited, tsa: vendor
\t priority:  1
tc: 1 ratelimit: unlimited, tsa: vendor
\t priority:  0
"""


def test_ibstat():
    cas = rdma.parse_ibstat(IBSTAT)
    assert [c.name for c in cas] == ["mlx5_0", "mlx5_1"]
    assert cas[0].model == "ConnectX-7" and cas[0].firmware == "28.39.1002"
    p0, p1 = cas[0].ports[0], cas[1].ports[0]
    assert (p0.state, p0.phys_state, p0.rate_gbps, p0.link_layer) == \
        ("Active", "LinkUp", 400.0, "InfiniBand")
    assert (p1.state, p1.phys_state, p1.rate_gbps) == ("Down", "Polling", 10.0)


def test_ibstat_empty_and_garbage():
    assert rdma.parse_ibstat("") == []
    with pytest.raises(ParseError):
        rdma.parse_ibstat("ibstat: command not understood")


def test_ibv_devinfo():
    info = rdma.parse_ibv_devinfo(IBV_DEVINFO)
    assert info["mlx5_0"][0]["vendor_part_id"] == "4129"
    port = info["mlx5_0"][1]
    assert port["state"] == "PORT_ACTIVE"
    assert (port["max_mtu"], port["active_mtu"]) == ("4096", "2048")
    assert port["link_layer"] == "InfiniBand"


def test_mlxconfig():
    cfg = rdma.parse_mlxconfig(MLXCONFIG)
    assert cfg["LINK_TYPE_P1"] == "IB(1)" and cfg["ATS_ENABLED"] == "False(0)"
    with pytest.raises(ParseError):
        rdma.parse_mlxconfig("-E- Failed to open device")


def test_mlnx_qos():
    qos = rdma.parse_mlnx_qos(MLNX_QOS)
    assert qos.trust == "dscp" and qos.pfc_enabled == (3,)
    pcp = MLNX_QOS.replace("trust state: dscp", "trust state: pcp").replace(
        "enabled     0   0   0   1   0   0   0   0", "enabled     1   0   0   0   0   0   0   0")
    qos = rdma.parse_mlnx_qos(pcp)
    assert qos.trust == "pcp" and qos.pfc_enabled == (0,)
    with pytest.raises(ParseError):
        rdma.parse_mlnx_qos("Priority trust state: dscp\n")


def test_ib_counters_skip_unreadable():
    assert rdma.parse_ib_counters({"symbol_error": "5\n", "link_downed": "x"}) == \
        {"symbol_error": 5}
