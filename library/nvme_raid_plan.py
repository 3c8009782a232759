#!/usr/bin/python
"""Plan the NVMe data RAID: which drives, and whether touching them is safe.

Read-only: it never writes to a device. The nvme_raid role acts on its answer.
"""

from __future__ import annotations

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: nvme_raid_plan
short_description: Plan a RAID0 of the NVMe data drives and say whether it is safe
description:
  - Lists the NVMe data drives (every NVMe disk except those holding the OS
    mounts), or takes an explicit list of devices.
  - Every name (O(devices), O(exclude)) is resolved first (C(realpath) of
    C(/dev/disk/by-id/...) and the like, then C(lsblk) by major:minor), so two
    names of one drive compare equal.
  - Refuses, whatever O(wipe) says, a drive that has partitions, holders
    (LVM/dm, md), any mount point on it or on anything stacked on it, an active
    LVM PV, membership of an assembled md array, a ZFS member signature on it or
    on any of its partitions, or that holds C(/), C(/boot), C(/boot/efi) or swap
    (found through C(lsblk)'s holder tree, C(/proc/self/mountinfo) and C(/proc/swaps)).
  - A drive is blank when C(blkid -p) finds nothing and its first and last MiB
    read as zeros. Any other drive (a signature, or content blkid does not
    recognise) is planned only with O(wipe=true).
  - Recognises an array that already exists with exactly the planned members,
    so a second run plans nothing new.
  - Changes nothing on the host.
version_added: "0.1.0"
author: rackready
options:
  devices:
    description: Explicit data devices; empty means discover NVMe disks.
    type: list
    elements: str
    default: []
  exclude:
    description: Devices never to use, in addition to the OS drives.
    type: list
    elements: str
    default: []
  os_mounts:
    description: Mount points whose backing disks are OS drives.
    type: list
    elements: str
    default: ["/", "/boot", "/boot/efi", "[SWAP]"]
  raid_device:
    description: The md device to create.
    type: str
    default: /dev/md0
  level:
    description: RAID level (only striping is supported).
    type: int
    choices: [0]
    default: 0
  chunk_kb:
    description: Chunk size in KiB.
    type: int
    default: 512
  filesystem:
    description: File system to put on the array.
    type: str
    choices: [xfs, ext4]
    default: xfs
  wipe:
    description:
      - Allow drives that carry a signature or unrecognised data (and nothing
        refused above) to be planned; the role wipes them.
      - Never allows a refused drive (partitions, holders, mounts, active PVs, md
        or ZFS members, the OS drive).
    type: bool
    default: false
  mdstat_path:
    description: Where to read the kernel's md state.
    type: path
    default: /proc/mdstat
  mountinfo_path:
    description: The mount table read to find the devices behind O(os_mounts).
    type: path
    default: /proc/self/mountinfo
  swaps_path:
    description: The active swap list.
    type: path
    default: /proc/swaps
notes:
  - Supports check mode; it is read-only in any mode (devices are opened read-only).
"""

EXAMPLES = r"""
- name: Plan the data RAID
  nvme_raid_plan:
    filesystem: xfs
  register: nvme_raid_register_plan

- name: Plan on explicit drives
  nvme_raid_plan:
    devices: [/dev/nvme1n1, /dev/nvme2n1]
    wipe: false
"""

RETURN = r"""
plan:
  description: What the role would build.
  type: dict
  returned: always
  sample: {"devices": ["/dev/nvme1n1"], "raid_device": "/dev/md0", "level": 0,
           "chunk_kb": 512, "filesystem": "xfs"}
safe:
  description: True when no drive is refused and every planned drive is blank, or wipe is allowed.
  type: bool
  returned: always
reasons:
  description: One line per finding that makes a drive unsafe (or would, without wipe).
  type: list
  elements: str
  returned: always
dirty:
  description:
    - Planned drives that are not blank but not refused (a signature or
      unrecognised data); the role wipes only these, and only with wipe.
  type: list
  elements: str
  returned: always
refused:
  description:
    - Planned drives refused whatever wipe says (partitions, holders, mounts,
      active PV, md or ZFS member, OS drive).
  type: list
  elements: str
  returned: always
blank:
  description: Planned drives proved blank (blkid finds nothing, first and last MiB are zeros).
  type: list
  elements: str
  returned: always
resolved:
  description: Each name given in devices, as resolved to its kernel device.
  type: dict
  returned: always
excluded:
  description: Drives left out, with why.
  type: dict
  returned: always
existing:
  description: The array is already active with exactly the planned drives.
  type: bool
  returned: always
md_available:
  description: Whether the kernel has md (the mdstat file exists).
  type: bool
  returned: always
"""

LSBLK_COLUMNS = "NAME,KNAME,PATH,MAJ:MIN,TYPE,TRAN,MOUNTPOINTS,FSTYPE,PTTYPE"
# util-linux before 2.37 has no MOUNTPOINTS (one mount per device only)
LSBLK_COLUMNS_OLD = LSBLK_COLUMNS.replace("MOUNTPOINTS", "MOUNTPOINT")
EDGE_BYTES = 1 << 20  # blank: the first and the last MiB read as zeros

# blkid TYPE values that are refused on the drive or any partition, whatever wipe says
REFUSED_TYPES = {"zfs_member": "ZFS member"}


def parse_lsblk(text: str) -> list[dict]:
    """Top-level block devices from `lsblk -J` (children nested under each)."""
    return list(json.loads(text or "{}").get("blockdevices") or [])


def _path(node: dict) -> str:
    return node.get("path") or "/dev/" + (node.get("kname") or node["name"])


def _walk(node: dict):
    yield node
    for child in node.get("children") or []:
        yield from _walk(child)


def _mounts(node: dict) -> set[str]:
    """Every mount point of a device and everything stacked on it."""
    found: set[str] = set()
    for n in _walk(node):
        found |= {m for m in (n.get("mountpoints") or [n.get("mountpoint")]) if m}
    return found


def _os_hit(node: dict, os_mounts: list[str], os_majmin: set[str]) -> list[str]:
    """The OS mounts this drive backs, by lsblk mount points or by the mount table's maj:min."""
    hits = _mounts(node) & set(os_mounts)
    if not hits:  # lsblk showed no such mount point (bind mounts, some containers)
        hits = {f"{_path(n)} ({n['maj:min']})" for n in _walk(node)
                if n.get("maj:min") in os_majmin}
    return sorted(hits)


def os_disks(blockdevices: list[dict], os_mounts: list[str],
             os_majmin: set[str] | None = None) -> set[str]:
    """Disks that back an OS mount, directly or through partitions, LVM or md."""
    return {_path(d) for d in blockdevices if _os_hit(d, os_mounts, os_majmin or set())}


def nvme_disks(blockdevices: list[dict]) -> list[str]:
    """Whole NVMe namespaces (partitions and controllers are not disks)."""
    return sorted(
        _path(d)
        for d in blockdevices
        if d.get("type") == "disk"
        and (d.get("tran") == "nvme" or re.fullmatch(r"nvme\d+n\d+", d.get("name", "")))
    )


def parse_blkid_export(text: str) -> dict[str, str]:
    """KEY=value lines of `blkid -p -o export`; empty when nothing was found."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_mdstat(text: str) -> dict[str, list[str]]:
    """Arrays in /proc/mdstat (active, read-only or inactive): md name -> member names."""
    arrays: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        m = re.match(r"^(md\w*)\s*:\s*(?:active|inactive)\s+((?:\([^)]*\)\s+)*)"
                     r"(?:(?:\S*raid\d+|linear|multipath|faulty)\s+)?(.*)$", line)
        if m:
            arrays[m.group(1)] = sorted(re.sub(r"\[\d+\].*$", "", p) for p in m.group(3).split())
    return arrays


def parse_mountinfo(text: str, mount_points: list[str]) -> set[str]:
    """maj:min of the devices mounted at the given mount points (/proc/self/mountinfo)."""
    wanted = set(mount_points)
    out = set()
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) >= 5 and f[4].replace("\\040", " ") in wanted:
            out.add(f[2])
    return out


def parse_partx(text: str) -> int:
    """Partitions listed by `partx -g -o NR` (the table on disk, whatever the kernel scanned)."""
    return sum(1 for ln in (text or "").splitlines() if ln.strip().isdigit())


def findings(node: dict | None, probe: dict[str, str]) -> list[str]:
    """Signatures blkid recognised on the drive itself (they need the wipe flag)."""
    found = []
    if probe.get("PTTYPE"):
        found.append(f"{probe['PTTYPE']} partition table")
    if probe.get("TYPE") == "linux_raid_member":
        found.append("md superblock")
    elif probe.get("TYPE") == "LVM2_member":
        found.append("LVM PV signature")
    elif probe.get("TYPE"):
        found.append(f"{probe['TYPE']} file system signature")
    return found


def refusals(node: dict | None, probes: dict[str, dict[str, str]], facts: dict,
             params: dict) -> list[str]:
    """Why a drive may never be touched, whatever wipe says."""
    if node is None:
        return []
    why = []
    path = _path(node)
    os_hit = _os_hit(node, params["os_mounts"], facts.get("os_majmin", set()))
    if os_hit:
        why.append("holds the OS (" + ", ".join(os_hit) + ")")
    kids = node.get("children") or []
    parts = [c.get("name", "?") for c in kids if c.get("type") == "part"]
    table_parts = facts.get("table_parts", {}).get(path, 0)
    if parts:
        why.append("has partitions " + ", ".join(parts))
    elif table_parts:
        why.append(f"partition table lists {table_parts} partition(s)")
    # Holders: anything stacked on the drive or its partitions (LVM/dm, md, crypt).
    held = sorted({f"{c.get('name', '?')} ({c.get('type', '?')})"
                   for n in _walk(node) for c in n.get("children") or []
                   if c.get("type") != "part"})
    held += sorted(f"{h} (sysfs holder)" for n in _walk(node)
                   for h in facts.get("holders", {}).get(n.get("kname") or n.get("name"), [])
                   if not any(x.startswith(h + " ") for x in held))
    if held:
        why.append("held by " + ", ".join(held))
    if any(c.get("type") == "lvm" for n in _walk(node) for c in n.get("children") or []):
        why.append("active LVM PV")
    mounts = _mounts(node)
    if mounts:
        why.append("mounted at " + ", ".join(sorted(mounts)))
    members = facts.get("md_members", {})
    for n in _walk(node):
        name = n.get("kname") or n.get("name")
        if name in members:
            why.append(f"member of assembled md array {members[name]}")
    for n in _walk(node):
        kind = probes.get(_path(n), {}).get("TYPE")
        if kind in REFUSED_TYPES:
            where = "" if n is node else f" on {n.get('name')}"
            why.append(f"{REFUSED_TYPES[kind]}{where}")
    return why


def _md_name(raid_device: str) -> str:
    return os.path.basename(os.path.realpath(raid_device)) if raid_device else ""


def build_plan(
    params: dict,
    blockdevices: list[dict],
    probes: dict[str, dict[str, str]],
    mdstat: dict[str, list[str]] | None,
    facts: dict | None = None,
) -> dict:
    """Decide drives and safety from already-collected facts (pure).

    facts: os_majmin (maj:min behind the OS mounts and swap), holders (kname -> sysfs
    holders), table_parts (path -> partitions in the on-disk table), nonzero (path ->
    True when the first or last MiB holds data), resolved (given name -> path).
    Devices and exclusions arrive already resolved to kernel paths.
    """
    facts = dict(facts or {})
    facts.setdefault("md_members", {m: md for md, ms in (mdstat or {}).items() for m in ms})
    by_path = {_path(n): n for d in blockdevices for n in _walk(d)}
    parents = {_path(c): _path(d) for d in blockdevices for n in _walk(d)
               for c in n.get("children") or [] if c.get("type") == "part"}
    os_drives = os_disks(blockdevices, params["os_mounts"], facts.get("os_majmin"))
    excluded: dict[str, str] = {d: "OS drive" for d in sorted(os_drives)}
    for d in params["exclude"]:
        excluded.setdefault(d, "excluded by configuration")
    explicit = list(params["devices"])
    candidates = explicit or nvme_disks(blockdevices)
    devices = [d for d in candidates if d not in excluded]
    md_name = _md_name(params["raid_device"])
    members = sorted(os.path.basename(d) for d in devices)
    existing = bool(mdstat) and bool(devices) and mdstat.get(md_name) == members
    reasons: list[str] = []
    refused, dirty, blank = [], [], []
    for d in explicit:
        if d in os_drives:
            # An explicit list naming the OS drive is a mistake, never a plan.
            refused.append(d)
            hits = _os_hit(by_path[d], params["os_mounts"], facts.get("os_majmin", set()))
            reasons.append(f"{d}: holds the OS ({', '.join(hits)})")
    ours = {m: md_name for m in members} if existing else {}
    for d in devices:
        node = by_path.get(d)
        if node is None and not explicit:
            refused.append(d)
            reasons.append(f"{d}: not found by lsblk")
            continue
        f = {**facts, "md_members": {k: v for k, v in facts["md_members"].items()
                                     if k not in ours}}
        why = refusals(node, probes, f, params)
        if node is not None and node.get("type") == "part":
            # Members are whole drives; a partition belongs to a drive with other contents.
            parent = parents.get(d, "?")
            why.insert(0, f"is a partition of {parent}"
                          + (" (the OS drive)" if parent in os_drives else ""))
        if existing:
            # Our own array: its members are held by it and mounted through it.
            why = [w for w in why if w.startswith("holds the OS")]
        if why:
            refused.append(d)
            reasons.append(f"{d}: " + "; ".join(why))
            continue
        if existing:
            continue
        soft = findings(node, probes.get(d, {}))
        if facts.get("nonzero", {}).get(d) and not soft:
            soft.append("data blkid does not recognise in the first or last MiB")
        if soft:
            dirty.append(d)
            reasons.append(f"{d}: " + "; ".join(soft) + (" (wiped: nvme_raid_wipe)"
                                                         if params["wipe"] else ""))
        else:
            blank.append(d)
    safe = not refused and (not dirty or params["wipe"])
    return {
        "plan": {
            "devices": devices,
            "raid_device": params["raid_device"],
            "level": params["level"],
            "chunk_kb": params["chunk_kb"],
            "filesystem": params["filesystem"],
        },
        "safe": safe,
        "reasons": reasons,
        "dirty": dirty,
        "refused": refused,
        "blank": blank,
        "excluded": excluded,
        "existing": existing,
        "md_available": mdstat is not None,
        "resolved": dict(facts.get("resolved", {})),
    }


def _run(module: AnsibleModule, args: list[str], ok_rcs: tuple[int, ...] = (0,)) -> str:
    rc, out, err = module.run_command(args)
    if rc not in ok_rcs:
        module.fail_json(msg=f"{' '.join(args)} failed (rc={rc}): {err.strip() or out.strip()}")
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def edges_nonzero(path: str, size: int = EDGE_BYTES) -> bool:
    """True when the first or the last `size` bytes hold anything but zeros (read-only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        for off in sorted({0, max(0, end - size)}):
            os.lseek(fd, off, os.SEEK_SET)
            if os.read(fd, min(size, end)).strip(b"\0"):
                return True
        return False
    finally:
        os.close(fd)


def resolve(module: AnsibleModule, name: str) -> str:
    """A device name (by-id, by-path, a link, /dev/xyz) -> its kernel path, or fail."""
    import stat

    real = os.path.realpath(name)
    try:
        mode = os.stat(real).st_mode
    except OSError:
        module.fail_json(msg=f"nvme_raid: device {name} does not exist on this host")
    if not stat.S_ISBLK(mode):
        module.fail_json(msg=f"nvme_raid: {name} ({real}) is not a block device")
    return real


def _lsblk(module: AnsibleModule, lsblk: str, *devs: str) -> list[dict]:
    rc, out, _ = module.run_command([lsblk, "-J", "-o", LSBLK_COLUMNS, *devs])
    if rc != 0:  # util-linux < 2.37: no MOUNTPOINTS column
        out = _run(module, [lsblk, "-J", "-o", LSBLK_COLUMNS_OLD, *devs])
    return parse_lsblk(out)


def _holders(kname: str) -> list[str]:
    try:
        return sorted(os.listdir(f"/sys/class/block/{kname}/holders"))
    except OSError:
        return []


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "devices": {"type": "list", "elements": "str", "default": []},
            "exclude": {"type": "list", "elements": "str", "default": []},
            "os_mounts": {"type": "list", "elements": "str",
                          "default": ["/", "/boot", "/boot/efi", "[SWAP]"]},
            "raid_device": {"type": "str", "default": "/dev/md0"},
            "level": {"type": "int", "choices": [0], "default": 0},
            "chunk_kb": {"type": "int", "default": 512},
            "filesystem": {"type": "str", "choices": ["xfs", "ext4"], "default": "xfs"},
            "wipe": {"type": "bool", "default": False},
            "mdstat_path": {"type": "path", "default": "/proc/mdstat"},
            "mountinfo_path": {"type": "path", "default": "/proc/self/mountinfo"},
            "swaps_path": {"type": "path", "default": "/proc/swaps"},
        },
        supports_check_mode=True,
    )
    p = dict(module.params)
    lsblk = module.get_bin_path("lsblk", required=True)
    blkid = module.get_bin_path("blkid", required=True)
    partx = module.get_bin_path("partx")
    # Resolve every name before comparing: /dev/disk/by-id/x and /dev/nvme0n1 are one drive.
    resolved = {d: resolve(module, d) for d in p["devices"]}
    p["devices"] = list(dict.fromkeys(resolved.values()))
    p["exclude"] = [os.path.realpath(d) for d in p["exclude"]]
    # All disks (to find the OS drives) plus explicit devices such as loop devices,
    # which a plain listing may leave out.
    tree = _lsblk(module, lsblk)
    known = {_path(n) for d in tree for n in _walk(d)}
    for d in p["devices"]:
        if d not in known:
            tree += _lsblk(module, lsblk, d)
    by_path = {_path(n): n for d in tree for n in _walk(d)}
    wanted = list(p["devices"]) or nvme_disks(tree)
    # Probe each planned drive and everything on it (a ZFS member partition counts).
    # blkid exits 2 when it finds nothing to report.
    probes, nonzero, table_parts, holders = {}, {}, {}, {}
    for d in wanted:
        for n in _walk(by_path.get(d, {"path": d})):
            path = _path(n)
            if n.get("type") in (None, "disk", "loop", "part"):
                probes[path] = parse_blkid_export(
                    _run(module, [blkid, "-p", "-o", "export", path], (0, 2)))
            kname = n.get("kname") or n.get("name") or os.path.basename(path)
            holders[kname] = _holders(kname)
        nonzero[d] = edges_nonzero(d)
        if partx and by_path.get(d, {}).get("type") != "part":
            rc, out, _ = module.run_command([partx, "-g", "-o", "NR", d])
            table_parts[d] = parse_partx(out) if rc == 0 else 0
    os_majmin = parse_mountinfo(_read(p["mountinfo_path"]) or "", p["os_mounts"])
    if "[SWAP]" in p["os_mounts"]:
        for ln in (_read(p["swaps_path"]) or "").splitlines()[1:]:
            src = ln.split()[0] if ln.split() else ""
            try:
                st = os.stat(src)
                if st.st_rdev:
                    os_majmin.add(f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
            except OSError:
                continue
    mdstat_text = _read(p["mdstat_path"])
    mdstat = parse_mdstat(mdstat_text) if mdstat_text is not None else None
    facts = {"os_majmin": os_majmin, "holders": holders, "table_parts": table_parts,
             "nonzero": nonzero, "resolved": resolved}
    module.exit_json(changed=False, **build_plan(p, tree, probes, mdstat, facts))


if __name__ == "__main__":
    main()
