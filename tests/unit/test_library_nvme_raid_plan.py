"""nvme_raid_plan: drive discovery and the refusal to touch data.

No NVMe, mdadm or lsblk capture exists in tests/fixtures, so the lsblk JSON
below is written from util-linux's documented `lsblk -J` shape (same keys as the
controller's own lsblk 2.38 prints) for an XE9680-like layout: OS on nvme0n1
(EFI, /boot, LVM root) and eight data namespaces. The blkid probes are real:
`blkid -p -o export` runs on image files made here (blank, ext4 via mkfs.ext4,
an MBR written byte by byte), so the parser sees the tool's true output.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[2] / "library" / "nvme_raid_plan.py"
spec = importlib.util.spec_from_file_location("nvme_raid_plan", LIB)
plan_mod = importlib.util.module_from_spec(spec)
sys.modules["nvme_raid_plan"] = plan_mod
spec.loader.exec_module(plan_mod)


def disk(name: str, children: list | None = None, mount: str | None = None) -> dict:
    d = {"name": name, "path": f"/dev/{name}", "type": "disk", "tran": "nvme",
         "mountpoint": mount, "fstype": None, "pttype": None}
    if children:
        d["children"] = children
        d["pttype"] = "gpt"
    return d


def part(name: str, mount: str | None, children: list | None = None) -> dict:
    p = {"name": name, "path": f"/dev/{name}", "type": "part", "tran": None,
         "mountpoint": mount, "fstype": "vfat", "pttype": "gpt"}
    if children:
        p["children"] = children
    return p


OS_DISK = disk("nvme0n1", [
    part("nvme0n1p1", "/boot/efi"),
    part("nvme0n1p2", "/boot"),
    part("nvme0n1p3", None, [{"name": "vg0-root", "path": "/dev/mapper/vg0-root",
                              "type": "lvm", "tran": None, "mountpoint": "/",
                              "fstype": "ext4", "pttype": None}]),
])
XE9680_LSBLK = json.dumps({"blockdevices": [OS_DISK] + [disk(f"nvme{i}n1") for i in range(1, 9)]})
DATA = [f"/dev/nvme{i}n1" for i in range(1, 9)]


def params(**kw) -> dict:
    base = {"devices": [], "exclude": [], "os_mounts": ["/", "/boot", "/boot/efi", "[SWAP]"],
            "raid_device": "/dev/md0", "level": 0, "chunk_kb": 512, "filesystem": "xfs",
            "wipe": False, "mdstat_path": "/proc/mdstat"}
    base.update(kw)
    return base


def test_discovers_data_drives_and_leaves_out_the_os_drive():
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    out = plan_mod.build_plan(params(), tree, {}, None)
    assert out["plan"]["devices"] == DATA
    assert out["excluded"] == {"/dev/nvme0n1": "OS drive"}
    assert out["safe"] is True and out["reasons"] == []
    assert out["md_available"] is False


def test_os_on_md_mirror_excludes_both_members():
    # Variant: / on an md RAID1 over nvme0n1 and nvme1n1 (built from the layout above).
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    md = {"name": "md127", "path": "/dev/md127", "type": "raid1", "mountpoint": "/"}
    tree[0] = disk("nvme0n1", [copy.deepcopy(md)])
    tree[1] = disk("nvme1n1", [copy.deepcopy(md)])
    out = plan_mod.build_plan(params(), tree, {}, None)
    assert "/dev/nvme1n1" in out["excluded"] and "/dev/nvme1n1" not in out["plan"]["devices"]
    assert len(out["plan"]["devices"]) == 7


def test_explicit_list_naming_the_os_drive_is_refused_even_with_wipe():
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    out = plan_mod.build_plan(params(devices=["/dev/nvme0n1", "/dev/nvme1n1"], wipe=True),
                              tree, {}, None)
    assert out["safe"] is False
    assert any(r.startswith("/dev/nvme0n1: holds the OS") for r in out["reasons"])
    assert out["plan"]["devices"] == ["/dev/nvme1n1"]


def test_drive_with_partition_table_is_unsafe_unless_wipe():
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    tree[3] = disk("nvme3n1", [part("nvme3n1p1", None)])
    probes = {"/dev/nvme3n1": {"PTTYPE": "gpt", "PTUUID": "x"}}
    out = plan_mod.build_plan(params(), tree, probes, None)
    assert out["safe"] is False and out["dirty"] == ["/dev/nvme3n1"]
    assert out["reasons"] == ["/dev/nvme3n1: gpt partition table; holds nvme3n1p1"]
    assert plan_mod.build_plan(params(wipe=True), tree, probes, None)["safe"] is True


def test_md_superblock_and_mounted_drive_are_reported():
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    tree[2]["mountpoint"] = "/scratch"
    probes = {"/dev/nvme2n1": {"TYPE": "xfs"}, "/dev/nvme5n1": {"TYPE": "linux_raid_member"}}
    out = plan_mod.build_plan(params(), tree, probes, None)
    assert out["dirty"] == ["/dev/nvme2n1", "/dev/nvme5n1"]
    assert "xfs file system signature" in out["reasons"][0]
    assert "mounted at /scratch" in out["reasons"][0]
    assert out["reasons"][1] == "/dev/nvme5n1: md superblock"


# /proc/mdstat as the md driver documents it, for the eight data drives.
MDSTAT_ACTIVE = (
    "Personalities : [raid0]\n"
    "md0 : active raid0 nvme8n1[7] nvme7n1[6] nvme6n1[5] nvme5n1[4] nvme4n1[3] nvme3n1[2] "
    "nvme2n1[1] nvme1n1[0]\n"
    "      30004846592 blocks super 1.2 512k chunks\n\nunused devices: <none>\n"
)


def test_existing_array_with_the_planned_members_is_safe_and_not_rebuilt():
    # The members carry md superblocks (as they do after the first run).
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    probes = {d: {"TYPE": "linux_raid_member"} for d in DATA}
    mdstat = plan_mod.parse_mdstat(MDSTAT_ACTIVE)
    out = plan_mod.build_plan(params(), tree, probes, mdstat)
    assert out["existing"] is True and out["safe"] is True and out["dirty"] == []
    # One member short: the array is not ours, so the superblocks make it unsafe.
    mdstat["md0"] = mdstat["md0"][:-1]
    out = plan_mod.build_plan(params(), tree, probes, mdstat)
    assert out["existing"] is False and out["safe"] is False and len(out["dirty"]) == 8


def test_parse_mdstat_inactive_and_failed_members():
    text = ("Personalities :\nmd127 : inactive nvme1n1[0](S) nvme2n1[1](S)\n"
            "md1 : active (auto-read-only) raid1 sda1[0] sdb1[1](F)\n")
    assert plan_mod.parse_mdstat(text) == {"md127": ["nvme1n1", "nvme2n1"],
                                           "md1": ["sda1", "sdb1"]}


def _blkid(path: Path) -> tuple[int, str]:
    r = subprocess.run(["blkid", "-p", "-o", "export", str(path)], capture_output=True, text=True)
    return r.returncode, r.stdout


needs_blkid = pytest.mark.skipif(shutil.which("blkid") is None, reason="blkid not installed")


@needs_blkid
def test_real_blkid_on_blank_ext4_and_mbr_images(tmp_path: Path):
    blank = tmp_path / "blank.img"
    blank.write_bytes(b"\0" * (4 << 20))
    rc, out = _blkid(blank)
    assert rc == 2 and plan_mod.parse_blkid_export(out) == {}

    mbr = tmp_path / "mbr.img"
    raw = bytearray(4 << 20)
    raw[446 + 4] = 0x83  # one Linux partition entry: type, start LBA 2048, 4096 sectors
    raw[446 + 8:446 + 12] = (2048).to_bytes(4, "little")
    raw[446 + 12:446 + 16] = (4096).to_bytes(4, "little")
    raw[510:512] = b"\x55\xaa"
    mbr.write_bytes(bytes(raw))
    probe = plan_mod.parse_blkid_export(_blkid(mbr)[1])
    assert probe.get("PTTYPE") == "dos"
    assert plan_mod.findings(None, probe) == ["dos partition table"]

    mkfs = shutil.which("mkfs.ext4") or "/usr/sbin/mkfs.ext4"
    if not Path(mkfs).exists():
        pytest.skip("mkfs.ext4 not installed")
    ext4 = tmp_path / "ext4.img"
    ext4.write_bytes(b"\0" * (8 << 20))
    subprocess.run([mkfs, "-q", "-F", str(ext4)], check=True)
    probe = plan_mod.parse_blkid_export(_blkid(ext4)[1])
    assert probe["TYPE"] == "ext4"
    assert plan_mod.findings(None, probe) == ["ext4 file system signature"]


def test_module_refuses_filesystem_on_explicit_loop_device(tmp_path, monkeypatch, capsys):
    """main() end to end, tools faked at run_command: a loop drive holding ext4."""
    dev = tmp_path / "loop7"
    dev.write_bytes(b"")

    def fake_run(self, args, **kw):
        if args[0].endswith("lsblk"):
            if str(dev) in args:
                return 0, json.dumps({"blockdevices": [
                    {"name": "loop7", "path": str(dev), "type": "loop", "mountpoint": None}]}), ""
            return 0, XE9680_LSBLK, ""
        return 0, "UUID=abc\nTYPE=ext4\nUSAGE=filesystem\n", ""

    from ansible.module_utils import basic
    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, n, **kw: f"/usr/bin/{n}")
    args = {"ANSIBLE_MODULE_ARGS": {"devices": [str(dev)],
                                    "mdstat_path": str(tmp_path / "no-mdstat")}}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps(args).encode())
    with pytest.raises(SystemExit):
        plan_mod.main()
    result = json.loads(capsys.readouterr().out)
    assert result["changed"] is False
    assert result["safe"] is False and result["md_available"] is False
    assert result["reasons"] == [f"{dev}: ext4 file system signature"]
