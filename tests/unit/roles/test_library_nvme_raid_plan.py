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
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rackready.site.paths import PROJECT_ROOT

LIB = PROJECT_ROOT / "library" / "nvme_raid_plan.py"
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


def test_partitions_are_refused_even_with_wipe():
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    tree[3] = disk("nvme3n1", [part("nvme3n1p1", None)])
    probes = {"/dev/nvme3n1": {"PTTYPE": "gpt", "PTUUID": "x"}}
    for wipe in (False, True):
        out = plan_mod.build_plan(params(wipe=wipe), tree, probes, None)
        assert out["safe"] is False and out["refused"] == ["/dev/nvme3n1"]
        assert out["reasons"] == ["/dev/nvme3n1: has partitions nvme3n1p1"]


def test_signature_without_partitions_needs_the_wipe_flag():
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    probes = {"/dev/nvme2n1": {"TYPE": "xfs"}, "/dev/nvme5n1": {"TYPE": "linux_raid_member"},
              "/dev/nvme6n1": {"PTTYPE": "gpt"}}
    out = plan_mod.build_plan(params(), tree, probes, None)
    assert out["safe"] is False and out["refused"] == []
    assert out["dirty"] == ["/dev/nvme2n1", "/dev/nvme5n1", "/dev/nvme6n1"]
    assert out["reasons"] == ["/dev/nvme2n1: xfs file system signature",
                              "/dev/nvme5n1: md superblock", "/dev/nvme6n1: gpt partition table"]
    assert plan_mod.build_plan(params(wipe=True), tree, probes, None)["safe"] is True


def test_mounted_drive_is_refused_even_with_wipe():
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    tree[2]["mountpoint"] = "/scratch"
    out = plan_mod.build_plan(params(wipe=True), tree, {"/dev/nvme2n1": {"TYPE": "xfs"}}, None)
    assert out["safe"] is False and out["refused"] == ["/dev/nvme2n1"]
    assert out["reasons"] == ["/dev/nvme2n1: mounted at /scratch"]


def test_os_drive_found_through_the_mount_table_major_minor():
    """lsblk shows no mount point (e.g. a bind-mounted /), mountinfo's maj:min does."""
    tree = plan_mod.parse_lsblk(XE9680_LSBLK)
    tree[4]["maj:min"] = "259:4"
    mountinfo = "22 1 259:4 / / rw,relatime shared:1 - ext4 /dev/nvme4n1 rw\n"
    facts = {"os_majmin": plan_mod.parse_mountinfo(mountinfo, ["/"])}
    out = plan_mod.build_plan(params(), tree, {}, None, facts)
    assert out["excluded"]["/dev/nvme4n1"] == "OS drive"
    assert "/dev/nvme4n1" not in out["plan"]["devices"]


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
    # nvme8n1 is not in md0: md0 is not the planned array, and its seven members
    # are refused even with wipe; nvme8n1's stale superblock needs the flag.
    mdstat["md0"] = mdstat["md0"][:-1]
    out = plan_mod.build_plan(params(wipe=True), tree, probes, mdstat)
    assert out["existing"] is False and out["safe"] is False
    assert len(out["refused"]) == 7 and out["dirty"] == ["/dev/nvme8n1"]
    assert out["reasons"][0] == "/dev/nvme1n1: member of assembled md array md0"


def test_parse_mdstat_inactive_read_only_and_failed_members():
    text = ("Personalities :\nmd127 : inactive nvme1n1[0](S) nvme2n1[1](S)\n"
            "md1 : active (auto-read-only) raid1 sda1[0] sdb1[1](F)\n"
            "md2 : active (read-only) raid0 nvme3n1[0] nvme4n1[1]\n")
    assert plan_mod.parse_mdstat(text) == {"md127": ["nvme1n1", "nvme2n1"],
                                           "md1": ["sda1", "sdb1"],
                                           "md2": ["nvme3n1", "nvme4n1"]}


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




# ---------------------------------------------------------------------------
# The module end to end on real block devices: images built here, attached as
# loop devices, and the module's own lsblk/blkid/partx calls reading them. Every
# refusal case runs with wipe=true and must still be refused.
#
# This machine's kernel has no partition-table parsers, no device-mapper and no
# md: partitions are added with `partx -a` (BLKPG, which needs no parser), and
# what needs dm (an active LV) or md (an assembled array) is simulated on top of
# the real lsblk JSON / with an mdstat file, as each test says.
# ---------------------------------------------------------------------------

MiB = 1 << 20
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="loop devices, partx and mount need root")


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def image(path: Path, mib: int, parts: list[tuple[int, int, int]] = ()) -> Path:
    """A sparse image with an MBR of (type, start MiB, size MiB) entries."""
    with open(path, "wb") as f:
        f.truncate(mib * MiB)
        if parts:
            f.seek(446)
            for kind, start, size in parts:
                f.write(bytes([0, 0, 0, 0, kind, 0, 0, 0]) + (start * 2048).to_bytes(4, "little")
                        + (size * 2048).to_bytes(4, "little"))
            f.seek(510)
            f.write(b"\x55\xaa")
    return path


def zfs_labels(path: Path, offset: int) -> None:
    """Four uberblocks (magic 0x00bab10c) in the first vdev label at `offset`: what
    util-linux's zfs prober counts to call a device zfs_member (zfsutils is not
    installable here: Debian ships it in contrib)."""
    with open(path, "r+b") as f:
        for i in range(4):
            f.seek(offset + 128 * 1024 + i * 1024)
            f.write((0x00BAB10C).to_bytes(8, "little") + (5000).to_bytes(8, "little"))


class Loops:
    def __init__(self, tmp: Path) -> None:
        self.tmp, self.devs, self.mounts = tmp, [], []

    def attach(self, img: Path) -> str:
        dev = sh("losetup", "-f", "--show", "-P", str(img)).strip()
        self.devs.append(dev)
        subprocess.run(["partx", "-a", dev], capture_output=True, check=False)
        return dev

    def mount(self, dev: str, where: Path) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        sh("mount", dev, str(where))
        self.mounts.append(where)
        return where

    def close(self) -> None:
        for m in reversed(self.mounts):
            subprocess.run(["umount", str(m)], check=False)
        for d in self.devs:
            subprocess.run(["partx", "-d", d], capture_output=True, check=False)
            subprocess.run(["losetup", "-d", d], check=False)


@pytest.fixture
def loops(tmp_path):
    lp = Loops(tmp_path)
    yield lp
    lp.close()


@pytest.fixture
def run_module(monkeypatch, capsys, tmp_path):
    from ansible.module_utils import basic

    def run(**args) -> dict:
        args.setdefault("mdstat_path", str(tmp_path / "no-mdstat"))
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS",
                            json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
        with pytest.raises(SystemExit):
            plan_mod.main()
        out = json.loads(capsys.readouterr().out)
        assert not out.get("failed"), out
        assert out["changed"] is False
        return out
    return run


def mkfs(kind: str, dev: str) -> None:
    tool = shutil.which(f"mkfs.{kind}") or f"/usr/sbin/mkfs.{kind}"
    if not Path(tool).exists():
        pytest.skip(f"mkfs.{kind} not installed")
    sh(tool, "-q", "-f" if kind == "xfs" else "-F", dev)


def pvcreate(dev: str) -> None:
    tool = shutil.which("pvcreate") or "/usr/sbin/pvcreate"
    if not Path(tool).exists():
        pytest.skip("pvcreate not installed (apt-get install lvm2)")
    sh(tool, "-ff", "-y", dev)


@needs_root
def test_real_blank_drive_is_planned_without_wipe_and_in_check_mode(loops, tmp_path, run_module):
    dev = loops.attach(image(tmp_path / "blank.img", 16))
    out = run_module(devices=[dev], wipe=False)
    assert out["safe"] is True and out["blank"] == [dev] and out["dirty"] == []
    assert out["reasons"] == []
    assert run_module(devices=[dev], _ansible_check_mode=True)["safe"] is True


@needs_root
@pytest.mark.parametrize("where", ["first", "last"])
def test_real_unrecognised_data_needs_the_wipe_flag(loops, tmp_path, run_module, where):
    img = image(tmp_path / "junk.img", 16)
    with open(img, "r+b") as f:
        f.seek(4096 if where == "first" else 16 * MiB - 8192)
        f.write(b"database page that no prober knows")
    dev = loops.attach(img)
    assert subprocess.run(["blkid", "-p", dev], capture_output=True).returncode == 2
    out = run_module(devices=[dev], wipe=False)
    assert out["safe"] is False and out["dirty"] == [dev] and out["blank"] == []
    assert out["reasons"] == [f"{dev}: data blkid does not recognise in the first or last MiB"]
    assert run_module(devices=[dev], wipe=True)["safe"] is True


@needs_root
@pytest.mark.parametrize("kind", ["ext4", "xfs"])
def test_real_unmounted_file_system_needs_the_wipe_flag(loops, tmp_path, run_module, kind):
    dev = loops.attach(image(tmp_path / f"{kind}.img", 320))
    mkfs(kind, dev)
    out = run_module(devices=[dev], wipe=False)
    assert out["safe"] is False and out["dirty"] == [dev]
    assert out["reasons"] == [f"{dev}: {kind} file system signature"]
    assert run_module(devices=[dev], wipe=True)["safe"] is True


@needs_root
def test_real_data_drive_mounted_at_var_is_refused_with_wipe(loops, tmp_path, run_module):
    dev = loops.attach(image(tmp_path / "var.img", 32))
    mkfs("ext4", dev)
    var = loops.mount(dev, tmp_path / "var")
    out = run_module(devices=[dev], wipe=True)
    assert out["safe"] is False and out["refused"] == [dev] and out["dirty"] == []
    assert out["reasons"] == [f"{dev}: mounted at {var}"]


def _os_drive(loops: Loops, tmp_path: Path) -> tuple[str, Path]:
    """ESP (p1, unmounted), / (p2, ext4, mounted at tmp/root), p3 spare: an OS drive."""
    dev = loops.attach(image(tmp_path / "os.img", 96, [(0xEF, 1, 8), (0x83, 10, 40),
                                                       (0x8E, 51, 40)]))
    if not Path(f"{dev}p2").exists():
        pytest.fail(f"partx did not add the partitions of {dev}")
    mkfs("ext4", f"{dev}p2")
    return dev, loops.mount(f"{dev}p2", tmp_path / "root")


@needs_root
def test_real_os_drive_named_through_by_id_is_refused_with_wipe(loops, tmp_path, run_module):
    dev, root = _os_drive(loops, tmp_path)
    by_id = tmp_path / "disk" / "by-id" / "nvme-Dell_Ent_NVMe_CM6_RI_3.84TB_S0OS0001"
    by_id.parent.mkdir(parents=True)
    by_id.symlink_to(dev)
    os_mounts = ["/", "/boot", "/boot/efi", "[SWAP]", str(root)]
    out = run_module(devices=[str(by_id), dev], wipe=True, os_mounts=os_mounts)
    assert out["resolved"] == {str(by_id): dev, dev: dev}
    assert out["safe"] is False and out["refused"] == [dev]
    assert out["excluded"][dev] == "OS drive" and out["plan"]["devices"] == []
    assert out["reasons"] == [f"{dev}: holds the OS ({root})"]
    # Through the mount table alone (os_mounts names the mount; maj:min finds p2).
    out = run_module(devices=[str(by_id)], wipe=True, os_mounts=[str(root)],
                     mountinfo_path="/proc/self/mountinfo")
    assert out["refused"] == [dev] and "holds the OS" in out["reasons"][0]


@needs_root
def test_real_partition_of_the_os_drive_holding_a_pv_is_refused(loops, tmp_path, run_module):
    dev, root = _os_drive(loops, tmp_path)
    pvcreate(f"{dev}p3")
    assert plan_mod.parse_blkid_export(sh("blkid", "-p", "-o", "export", f"{dev}p3"))[
        "TYPE"] == "LVM2_member"
    out = run_module(devices=[f"{dev}p3"], wipe=True,
                     os_mounts=["/", "/boot", "/boot/efi", "[SWAP]", str(root)])
    assert out["safe"] is False and out["refused"] == [f"{dev}p3"]
    assert out["reasons"] == [f"{dev}p3: is a partition of {dev} (the OS drive)"]


def _lsblk_tree(dev: str) -> list[dict]:
    return plan_mod.parse_lsblk(sh("lsblk", "-J", "-o", plan_mod.LSBLK_COLUMNS, dev))


@needs_root
def test_real_active_pv_mounted_at_srv_db_is_refused_with_wipe(loops, tmp_path):
    """pvcreate writes the real PV label; activation needs device-mapper, which this
    kernel lacks, so the LV that activation adds is grafted onto the real lsblk JSON
    exactly as lsblk prints an active LV (type lvm, under its PV)."""
    dev = loops.attach(image(tmp_path / "pv.img", 32))
    pvcreate(dev)
    probes = {dev: plan_mod.parse_blkid_export(sh("blkid", "-p", "-o", "export", dev))}
    assert probes[dev]["TYPE"] == "LVM2_member"
    tree = _lsblk_tree(dev)
    # Inactive PV: only its signature, so the wipe flag decides.
    out = plan_mod.build_plan(params(devices=[dev]), tree, probes, None)
    assert out["dirty"] == [dev] and out["reasons"] == [f"{dev}: LVM PV signature"]
    tree[0]["children"] = [{"name": "vg_db-lv_db", "kname": "dm-0", "maj:min": "254:0",
                            "path": "/dev/mapper/vg_db-lv_db", "type": "lvm",
                            "mountpoints": ["/srv/db"]}]
    out = plan_mod.build_plan(params(devices=[dev], wipe=True), tree, probes, None)
    assert out["safe"] is False and out["refused"] == [dev]
    assert out["reasons"] == [f"{dev}: held by vg_db-lv_db (lvm); active LVM PV; "
                              "mounted at /srv/db"]


@needs_root
def test_real_root_on_zfs_drive_with_unmounted_esp_is_refused(loops, tmp_path, run_module):
    """/ on ZFS: no block device is mounted at /, the ESP is not mounted; the drive
    holds a zfs_member partition and partitions, and is refused for both."""
    img = image(tmp_path / "zfs.img", 160, [(0xEF, 1, 8), (0xBF, 10, 140)])
    zfs_labels(img, 10 * MiB)
    dev = loops.attach(img)
    assert plan_mod.parse_blkid_export(sh("blkid", "-p", "-o", "export", f"{dev}p2"))[
        "TYPE"] == "zfs_member"
    out = run_module(devices=[dev], wipe=True)
    assert out["safe"] is False and out["refused"] == [dev]
    assert out["reasons"] == [f"{dev}: has partitions {Path(dev).name}p1, {Path(dev).name}p2; "
                              f"ZFS member on {Path(dev).name}p2"]


@needs_root
def test_real_whole_disk_zfs_member_is_refused(loops, tmp_path, run_module):
    img = image(tmp_path / "zfs-whole.img", 80)
    zfs_labels(img, 0)
    dev = loops.attach(img)
    out = run_module(devices=[dev], wipe=True)
    assert out["refused"] == [dev] and out["reasons"] == [f"{dev}: ZFS member"]


@needs_root
def test_real_member_of_an_assembled_md_array_is_refused(loops, tmp_path, run_module):
    """This kernel has no md: the array is an mdstat file naming the real loop device."""
    dev = loops.attach(image(tmp_path / "md.img", 16))
    mdstat = tmp_path / "mdstat"
    name = Path(dev).name
    mdstat.write_text(f"Personalities : [raid1]\nmd1 : active (auto-read-only) raid1 "
                      f"{name}[0] nvme9n1[1]\n      1000 blocks super 1.2 [2/2] [UU]\n\n"
                      "unused devices: <none>\n")
    out = run_module(devices=[dev], wipe=True, mdstat_path=str(mdstat))
    assert out["refused"] == [dev]
    assert out["reasons"] == [f"{dev}: member of assembled md array md1"]
    assert out["md_available"] is True


def test_module_refuses_a_name_that_is_not_a_block_device(tmp_path, monkeypatch, capsys):
    from ansible.module_utils import basic

    f = tmp_path / "not-a-disk"
    f.write_text("")
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps(
        {"ANSIBLE_MODULE_ARGS": {"devices": [str(f)]}}).encode())
    with pytest.raises(SystemExit):
        plan_mod.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] is True and out["msg"] == f"nvme_raid: {f} ({f}) is not a block device"
