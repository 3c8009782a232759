"""PCIe: link generation and width of every GPU and NIC, GPU-NIC NUMA pairing, ACS, and the
launch map (validation/launch_map.py: which NIC and CPUs each local rank uses)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from validation import launch_map, launch_read
from validation.checks.common import gpu_labels, m, rdma_devices, smi, topo_text
from validation.checks.fabric_health import compute_nics
from validation.checks.network import ibstat
from validation.checks.registry import CheckSkipped, Context, check, log
from validation.launch_map import cpulist
from validation.model import Measurement
from validation.probes.lspci import parse_lspci_vvv
from validation.probes.nvidia_smi import GpuInfo, short_bus_id
from validation.probes.pcie_path import Hop, read_path
from validation.probes.system import PciDevice, read_pci_devices


def pci_devices(ctx: Context) -> list[PciDevice]:
    return ctx.once("pci", lambda: read_pci_devices(ctx.path("/sys/bus/pci/devices")))


@check("pcie.gpu_link", emits=("gpu.pcie_gen", "gpu.pcie_width"),
       needs=("gpu",), timeout_s=60,
       title="PCIe generation and width of every GPU (DCGM accepts Gen3; the profile decides)")
def pcie_gpu_link(ctx: Context) -> Iterator[Measurement]:
    for g in smi(ctx).gpus:
        lab = gpu_labels(g)
        gen, source = link_gen(g)
        yield m("gpu.pcie_gen", gen, {**lab, "max": str(g.pcie_gen_max), "source": source,
                                      "current": str(g.pcie_gen)})
        yield m("gpu.pcie_width", g.pcie_width, {**lab, "max": str(g.pcie_width_max)})


def link_gen(g: GpuInfo) -> tuple[int | None, str]:
    """The generation to judge: cards downtrain to Gen1 at idle (ASPM), so an idle
    current gen below the link's max says nothing. Judged: the current gen when the
    link runs at its max or the GPU is busy (under load), else the link's max."""
    cur, top = g.pcie_gen, g.pcie_gen_max
    if cur is not None and top is not None and cur >= top:
        return cur, "current"
    if cur is not None and g.clock_events.get("idle") is False:
        return cur, "under-load"
    return top, "max" if top is not None else "unknown"  # None: not read, never idle Gen1


def nics(ctx: Context) -> list[PciDevice]:
    wanted = rdma_devices(ctx)
    found = [d for d in pci_devices(ctx) if d.is_mellanox_nic
             and (wanted is None or d.address.lower() in wanted)]
    if not found:
        raise CheckSkipped("no Mellanox/NVIDIA ConnectX device under /sys/bus/pci/devices")
    return found


@check("pcie.nic_link", emits=("nic.pcie_gen", "nic.pcie_width"),
       needs=("rdma",), timeout_s=30,
       title="PCIe generation and width of every ConnectX NIC (sysfs)")
def pcie_nic_link(ctx: Context) -> Iterator[Measurement]:
    for d in nics(ctx):
        lab = {"nic": d.address}
        yield m("nic.pcie_gen", d.gen, lab)
        yield m("nic.pcie_width", d.width, lab)


@check("pcie.path", emits=("pcie.path_width", "pcie.path_speed", "pcie.path_emulated"),
       # a VM slice's links are its hypervisor's: judged on the whole machine only
       metric_needs={"pcie.path_width": ("bare-metal",), "pcie.path_speed": ("bare-metal",)},
       needs=("gpu",), timeout_s=30,
       title="every PCIe link from each GPU and compute NIC up to its root port (PCIe switch "
             "uplinks too) at the speed and width both its ends support (sysfs)")
def pcie_path(ctx: Context) -> Iterator[Measurement]:
    # a VM slice (a GPU-subset scope drops bare-metal): its links are the hypervisor's, which
    # may report any rate; the path is reported, its links are not measured, and the limits
    # (which need bare-metal) are not applicable, as health.delta reads the profile for NVLink
    whole = ctx.profile is None or "bare-metal" in ctx.profile.requires
    if not ctx.path("/sys/bus/pci/devices").is_dir():
        if not whole:  # nothing to report; the limits read not applicable by their need
            log("pcie.path: no /sys/bus/pci/devices on this slice: no path to report")
            return
        raise CheckSkipped("no /sys/bus/pci/devices: the PCIe tree cannot be read")
    devices = [PathDevice(short_bus_id(g.bus_id), f"GPU {g.index} (serial "
                          f"{g.serial or 'unknown'}, PCI {short_bus_id(g.bus_id)})",
                          g.clock_events.get("idle") is True) for g in smi(ctx).gpus]
    devices += [PathDevice(addr, f"NIC {ca} (PCI {addr})", False)
                for ca, addr in compute_nics(ctx)]
    yield from path_measurements(ctx.sysroot, devices, links=whole)


class PathDevice(NamedTuple):
    address: str
    name: str  # in words, as a verdict names it
    idle: bool  # a GPU NVML reports idle (clocks event reason GPU idle)


def path_measurements(sysroot: Path, devices: list[PathDevice], links: bool = True
                      ) -> Iterator[Measurement]:
    """Each link once (a switch uplink serves a GPU and a NIC: one measurement naming both):
    width and speed as a fraction of what the link must train to, the lower maximum of its
    two ends (1.0: trained as it should).

    Speed at idle: an NVIDIA GPU lowers its own link's speed when idle (pcie.gpu_link: Gen1
    at rest), so the speed of the link directly above a GPU NVML reports idle, running
    below its maximum, is not judged here (pcie.gpu_link judges it under load, else at its
    maximum); its width is. Every other link, the switch uplinks shared by GPU and NIC
    included, is judged on both: the GPU's power management changes its own link only,
    and a switch or root port keeps the rate it trained to.

    A link whose end reports no link (width 0, speed Unknown: a hypervisor's emulated
    bridge) or a device with no port above it is emulated (pcie.path_emulated, a fact the
    profile makes its limits not applicable by, where every device reads it); on a node
    where other devices' paths read, such a link is a value that could not be read.
    links=False (a VM slice): the facts alone."""
    paths = {d.address: read_path(sysroot, d.address) for d in devices}
    emulated = {a: p is not None and (not p.hops or not all(h.reported for h in p.hops))
                for a, p in paths.items()}
    virtual = all(emulated.values())
    hops: dict[tuple[str, str], Hop] = {}
    behind: dict[tuple[str, str], list[str]] = {}
    idle_own: set[tuple[str, str]] = set()
    for address, name, idle in devices:
        path = paths[address]
        if path is None:  # no symlink into /sys/devices: nothing to walk
            if links:
                yield m("pcie.path_width", None, {"hop": f"unread -> {address}",
                                                  "behind": name})
            continue
        yield m("pcie.path_emulated", emulated[address], {"device": name})
        if not links:
            continue
        if not path.hops and not virtual:
            yield m("pcie.path_width", None, {"hop": f"none -> {address}", "behind": name,
                                              "trained": "no port above it"})
        for h in path.hops:
            key = (h.up.address, h.down.address)
            hops.setdefault(key, h)
            behind.setdefault(key, []).append(name)
            if idle and h.down.address == address:
                idle_own.add(key)
    for key, h in hops.items():
        lab = {"hop": f"{key[0]} -> {key[1]}", "behind": " and ".join(behind[key])}
        cur, want = h.current, h.expected
        if cur is None or want is None:
            if not virtual:  # an emulated end beside physical paths: a person looks
                yield m("pcie.path_width", None, {**lab, "trained": "an end reports no link"})
            continue
        lab["trained"] = (f"x{cur[1]} at {cur[0]:g} GT/s, both ends support x{want[1]} at "
                          f"{want[0]:g} GT/s")
        yield m("pcie.path_width", round(cur[1] / want[1], 3), lab)
        if key in idle_own and cur[0] < want[0]:
            continue  # an idle GPU's own link, downtrained by its power management
        yield m("pcie.path_speed", round(cur[0] / want[0], 3), lab)


@check("pcie.numa", emits=("gpu.local_nics",),
       needs=("gpu", "rdma"), timeout_s=30,
       title="every GPU has an RDMA NIC on its NUMA node")
def pcie_numa(ctx: Context) -> Iterator[Measurement]:
    by_addr = {d.address: d for d in pci_devices(ctx)}
    nic_nodes = [d.numa_node for d in nics(ctx)]
    for g in smi(ctx).gpus:
        dev = by_addr.get(short_bus_id(g.bus_id))
        node = dev.numa_node if dev else None
        # None: the platform reports no NUMA node (one domain), so every NIC is local
        yield m("gpu.local_nics", sum(n == node for n in nic_nodes),
                {**gpu_labels(g), "numa": str(node)})


@check("pcie.acs", emits=("pcie.acs_enabled",),
       needs=("rdma",), timeout_s=60,
       title="ACS redirect off on PCIe bridges (GPUDirect P2P/RDMA)")
def pcie_acs(ctx: Context) -> Iterator[Measurement]:
    devices = parse_lspci_vvv(ctx.run(["lspci", "-vvv"], timeout_s=60, artifact="lspci-vvv.txt"))
    for d in devices:
        if d.acs_ctl:
            on = d.acs_ctl.get("ReqRedir", False) or d.acs_ctl.get("CmpltRedir", False)
            yield m("pcie.acs_enabled", on, {"bridge": d.address})


@check("pcie.launch_map", emits=("launch.rank_binding", "launch.nic_path", "launch.switch_nics"),
       needs=("gpu", "rdma"), timeout_s=60,
       title="launch map: each local rank's GPU, the compute NIC behind its PCIe switch "
             "(else on its NUMA node), its NUMA node and CPU share")
def pcie_launch_map(ctx: Context) -> Iterator[Measurement]:
    yield from launch_measurements(launch_map_of(ctx))


def launch_measurements(lm: launch_map.LaunchMap) -> Iterator[Measurement]:
    """The map as measurements: one binding per rank (every part in its labels: the event
    stream and result.json carry the map, the report's table is built from it), and the
    two judged facts (profile nic.placement), each naming the GPU and the NIC."""
    art = f"artifacts/{launch_read.ARTIFACT}"
    for b in lm.ranks:
        gpu = {"gpu": str(b.gpu), "serial": b.serial or "unknown", "bus_id": b.bus_id}
        nic = b.nic or "none"
        yield m("launch.rank_binding", f"GPU {b.gpu} -> {nic} ({b.path}), NUMA "
                f"{b.numa if b.numa is not None else '-'}, CPUs {cpulist(b.cpus) or '-'}",
                {**gpu, "rank": str(b.rank), "nic": nic, "path": b.path,
                 "numa": "" if b.numa is None else str(b.numa), "cpus": cpulist(b.cpus),
                 "switch_nics": "+".join(b.switch_nics), "reason": b.reason}, art)
        # the path to the NIC this rank uses, and the compute NICs behind the GPU's own
        # switch (a NIC on another GPU's switch shows as 0 here and 2 there)
        yield m("launch.nic_path", b.path, {**gpu, "nic": nic}, art)
        yield m("launch.switch_nics", len(b.switch_nics),
                {**gpu, "nic": "+".join(b.switch_nics) or nic}, art)


def launch_map_of(ctx: Context) -> launch_map.LaunchMap:
    """The node's launch map, once per pass, written to artifacts/launch-map.json (the
    workloads of the same run bind their ranks from it)."""
    def make() -> launch_map.LaunchMap:
        ids = {g.index: (short_bus_id(g.bus_id), g.serial or "") for g in smi(ctx).gpus}
        compute = {ca.name for ca in ibstat(ctx)}
        lm = launch_read.read(
            lambda cmd: ctx.run(cmd, timeout_s=30), ctx.sysroot, compute_nics=compute,
            gpu_ids=ids, topo_text=topo_text(ctx))
        ctx.artifacts.mkdir(parents=True, exist_ok=True)
        (ctx.artifacts / launch_read.ARTIFACT).write_text(json.dumps(lm.to_dict(), indent=1))
        return lm
    return ctx.once("launch_map", make)
