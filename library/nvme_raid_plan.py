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
  - Inspects each drive for a partition table, a file system signature or an
    md superblock (low-level C(blkid -p) probing, C(lsblk) JSON for children
    and mounts) and reports C(safe=false) with a reason per drive unless
    O(wipe=true).
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
    description: Allow drives that carry data signatures to be planned (they will be destroyed).
    type: bool
    default: false
  mdstat_path:
    description: Where to read the kernel's md state.
    type: path
    default: /proc/mdstat
notes:
  - Supports check mode; it is read-only in any mode.
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
  description: True when no planned drive holds data, or wipe is allowed.
  type: bool
  returned: always
reasons:
  description: One line per finding that makes a drive unsafe (or would, without wipe).
  type: list
  elements: str
  returned: always
dirty:
  description: Planned drives carrying a partition table, a signature, children or a mount.
  type: list
  elements: str
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

LSBLK_COLUMNS = "NAME,PATH,TYPE,TRAN,MOUNTPOINT,FSTYPE,PTTYPE"


def parse_lsblk(text: str) -> list[dict]:
    """Top-level block devices from `lsblk -J` (children nested under each)."""
    return list(json.loads(text or "{}").get("blockdevices") or [])


def _path(node: dict) -> str:
    return node.get("path") or "/dev/" + node["name"]


def _mounts(node: dict) -> set[str]:
    """Every mount point of a device and everything stacked on it."""
    found = {m for m in (node.get("mountpoints") or [node.get("mountpoint")]) if m}
    for child in node.get("children") or []:
        found |= _mounts(child)
    return found


def os_disks(blockdevices: list[dict], os_mounts: list[str]) -> set[str]:
    """Disks that back an OS mount, directly or through partitions, LVM or md."""
    wanted = set(os_mounts)
    return {_path(d) for d in blockdevices if _mounts(d) & wanted}


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
    """Active arrays in /proc/mdstat: md name -> member device names."""
    arrays: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        m = re.match(r"^(md\w*)\s*:\s*(?:active|inactive)\s+(?:\(\S+\)\s+)?(?:\S*raid\d+\s+)?(.*)$",
                     line)
        if m:
            arrays[m.group(1)] = sorted(re.sub(r"\[\d+\].*$", "", p) for p in m.group(2).split())
    return arrays


def findings(node: dict | None, probe: dict[str, str]) -> list[str]:
    """Why a drive may hold data: partition table, signature, children, mounts."""
    found = []
    if probe.get("PTTYPE"):
        found.append(f"{probe['PTTYPE']} partition table")
    if probe.get("TYPE") == "linux_raid_member":
        found.append("md superblock")
    elif probe.get("TYPE"):
        found.append(f"{probe['TYPE']} file system signature")
    if node:
        kids = [c.get("name", "?") for c in node.get("children") or []]
        if kids:
            found.append("holds " + ", ".join(kids))
        mounts = _mounts(node)
        if mounts:
            found.append("mounted at " + ", ".join(sorted(mounts)))
    return found


def _md_name(raid_device: str) -> str:
    return os.path.basename(os.path.realpath(raid_device)) if raid_device else ""


def build_plan(
    params: dict,
    blockdevices: list[dict],
    probes: dict[str, dict[str, str]],
    mdstat: dict[str, list[str]] | None,
) -> dict:
    """Decide drives and safety from already-collected facts (pure)."""
    by_path = {_path(d): d for d in blockdevices}
    os_drives = os_disks(blockdevices, params["os_mounts"])
    excluded: dict[str, str] = {d: "OS drive" for d in sorted(os_drives)}
    for d in params["exclude"]:
        excluded.setdefault(d, "excluded by configuration")
    candidates = list(params["devices"]) or nvme_disks(blockdevices)
    devices = [d for d in candidates if d not in excluded]
    reasons: list[str] = []
    for d in params["devices"]:
        if d in os_drives:
            # An explicit list naming the OS drive is a mistake, never a plan.
            reasons.append(f"{d}: holds the OS ({', '.join(sorted(_mounts(by_path[d])))})")
    md_name = _md_name(params["raid_device"])
    members = sorted(os.path.basename(d) for d in devices)
    existing = bool(mdstat) and bool(devices) and mdstat.get(md_name) == members
    dirty = []
    if not existing:
        for d in devices:
            why = findings(by_path.get(d), probes.get(d, {}))
            if d not in by_path and not params["devices"]:
                why.append("not found by lsblk")
            if why:
                dirty.append(d)
                reasons.append(f"{d}: " + "; ".join(why))
    os_refused = any(d in os_drives for d in params["devices"])
    safe = not os_refused and (not dirty or params["wipe"])
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
        "excluded": excluded,
        "existing": existing,
        "md_available": mdstat is not None,
    }


def _run(module: AnsibleModule, args: list[str], ok_rcs: tuple[int, ...] = (0,)) -> str:
    rc, out, err = module.run_command(args)
    if rc not in ok_rcs:
        module.fail_json(msg=f"{' '.join(args)} failed (rc={rc}): {err.strip() or out.strip()}")
    return out


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
        },
        supports_check_mode=True,
    )
    p = module.params
    lsblk = module.get_bin_path("lsblk", required=True)
    blkid = module.get_bin_path("blkid", required=True)
    for d in p["devices"]:
        if not os.path.exists(d):
            module.fail_json(msg=f"nvme_raid: device {d} does not exist on this host")
    # All disks (to find the OS drives) plus explicit devices such as loop devices,
    # which a plain listing may leave out.
    tree = parse_lsblk(_run(module, [lsblk, "-J", "-o", LSBLK_COLUMNS]))
    known = {_path(d) for d in tree}
    for d in p["devices"]:
        if d not in known:
            tree += parse_lsblk(_run(module, [lsblk, "-J", "-o", LSBLK_COLUMNS, d]))
    wanted = list(p["devices"]) or nvme_disks(tree)
    # blkid exits 2 when it finds nothing to report: a blank drive.
    probes = {d: parse_blkid_export(_run(module, [blkid, "-p", "-o", "export", d], (0, 2)))
              for d in wanted}
    mdstat = None
    if os.path.exists(p["mdstat_path"]):
        with open(p["mdstat_path"], encoding="utf-8") as f:
            mdstat = parse_mdstat(f.read())
    module.exit_json(changed=False, **build_plan(p, tree, probes, mdstat))


if __name__ == "__main__":
    main()
