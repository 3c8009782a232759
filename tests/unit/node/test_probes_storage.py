"""NVMe and md parsers. No NVMe or md on the captured machine: the samples follow
nvme-cli's documented JSON (1.x flat, 2.x nested) and the kernel's /proc/mdstat format."""

from __future__ import annotations

import json

import pytest

from validation import xid_catalog
from validation.probes import kernel_log, lspci, storage
from validation.probes.nvidia_smi import ParseError


def nvme_v1(n: int) -> str:
    return json.dumps({"Devices": [
        {"NameSpace": 1, "DevicePath": f"/dev/nvme{i}n1", "Firmware": "2.1.8",
         "Index": i, "ModelNumber": "Dell Ent NVMe CM6 RI 3.84TB", "SerialNumber": f"S{i:03d}",
         "UsedBytes": 0, "MaximumLBA": 7501476528, "PhysicalSize": 3840755982336,
         "SectorSize": 512} for i in range(n)]})


def nvme_v2(n: int) -> str:
    return json.dumps({"Devices": [{"HostNQN": "nqn.2014-08.org.nvmexpress:uuid:x",
                                    "Subsystems": [{
        "Subsystem": f"nvme-subsys{i}", "Controllers": [{
            "Controller": f"nvme{i}", "SerialNumber": f"S{i:03d}",
            "ModelNumber": "SAMSUNG MZWLO3T8HCLS", "Firmware": "OPPA4B5Q",
            "Namespaces": [{"NameSpace": f"nvme{i}n1", "PhysicalSize": 3840755982336}]}]}
        for i in range(n)]}]})


@pytest.mark.parametrize("render", [nvme_v1, nvme_v2])
def test_nvme_list_both_formats(render):
    drives = storage.parse_nvme_list(render(8))
    assert len(drives) == 8
    assert drives[3].device == "/dev/nvme3n1" and drives[3].serial == "S003"
    assert drives[0].size_bytes == 3840755982336


def test_nvme_list_errors():
    assert storage.parse_nvme_list("") == []
    with pytest.raises(ParseError):
        storage.parse_nvme_list("{not json")
    with pytest.raises(ParseError):
        storage.parse_nvme_list('{"devices": []}')


RAID0 = (
    "Personalities : [raid0] [linear] [multipath] [raid1] [raid6] [raid5] [raid4] [raid10]\n"
    "md0 : active raid0 " + " ".join(f"nvme{i}n1[{i}]" for i in range(7, -1, -1)) + "\n"
    "      30004183040 blocks super 1.2 512k chunks\n\nunused devices: <none>\n"
)

RAID5_DEGRADED = """Personalities : [raid6] [raid5] [raid4]
md127 : active raid5 nvme2n1[3](F) nvme1n1[1] nvme0n1[0]
      7501211648 blocks super 1.2 level 5, 512k chunk, algorithm 2 [3/2] [UU_]
      bitmap: 0/28 pages [0KB], 65536KB chunk

unused devices: <none>
"""


def test_mdstat_healthy_raid0():
    (arr,) = storage.parse_mdstat(RAID0)
    assert (arr.name, arr.active, arr.level, len(arr.members), arr.missing) == \
        ("md0", True, "raid0", 8, 0)


def test_mdstat_degraded_raid5():
    (arr,) = storage.parse_mdstat(RAID5_DEGRADED)
    assert arr.failed == ("nvme2n1",) and (arr.expected, arr.working) == (3, 2)
    assert arr.missing == 1


def test_mdstat_inactive_and_empty():
    inactive = RAID0.replace("active raid0", "inactive")
    (arr,) = storage.parse_mdstat(inactive)
    assert arr.active is False
    assert storage.parse_mdstat("Personalities : \nunused devices: <none>\n") == []
    with pytest.raises(ParseError):
        storage.parse_mdstat("")


def test_xid_lines():
    # the driver's documented message form, as dmesg / kern.log print it; the class is the
    # catalog's (validation/xid_catalog.yml), never the parser's
    log = (
        "Nov 30 01:00:00 gpu01 kernel: [  12.3] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, "
        "name=python, GPU has fallen off the bus.\n"
        "[  13.0] NVRM: Xid (PCI:0000:00:07): 13, pid=99, name=app, Graphics Exception\n"
        "[  14.0] nvidia-nvswitch0: unrelated line\n"
    )
    events = kernel_log.parse_xids(log)
    catalog = xid_catalog.load()
    assert [(e.bus, e.xid, catalog.fails(e.xid)) for e in events] == \
        [("0000:00:06", 79, True), ("0000:00:07", 13, False)]
    assert kernel_log.xid_bus_key("00000000:00:06.0") == "0000:00:06"


@pytest.mark.parametrize("xid", [48, 56, 57, 58, 62, 64, 65, 73, 74, 79, 81, 95, 119, 120])
def test_xids_the_catalog_resolves_by_reset_reboot_or_rma_fail_the_node(xid):
    assert xid_catalog.load().fails(xid)


def test_application_xids_never_fail_a_node_on_their_own():
    catalog = xid_catalog.load()
    assert not any(catalog.fails(x) for x in (13, 31, 43, 45))


LSPCI = """17:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)
\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00
\t\tLnkCap:\tPort #1, Speed 32GT/s, Width x16, ASPM L1, Exit Latency L1 <4us
\t\tLnkSta:\tSpeed 32GT/s, Width x16
\tCapabilities: [200 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-

18:00.0 3D controller: NVIDIA Corporation GH100 [H200 SXM 141GB] (rev a1)
\tCapabilities: [78] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x8 (downgraded)
"""


def test_lspci_lnksta_and_acs():
    bridge, gpu = lspci.parse_lspci_vvv(LSPCI)
    assert bridge.address == "17:00.0" and (bridge.gen, bridge.width) == (5, 16)
    assert bridge.acs_ctl["ReqRedir"] is True and bridge.acs_ctl["TransBlk"] is False
    assert (gpu.gen, gpu.width, gpu.downgraded) == (4, 8, True)
    assert gpu.acs_ctl == {}
