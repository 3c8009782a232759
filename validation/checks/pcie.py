"""PCIe: link generation and width of every GPU and NIC, GPU-NIC NUMA pairing, ACS, and the
launch map (validation/launch_map.py: which NIC and CPUs each local rank uses)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from validation import launch_map, launch_read
from validation.checks.common import gpu_labels, m, rdma_devices, smi, topo_text
from validation.checks.network import ibstat
from validation.checks.registry import CheckSkipped, Context, check
from validation.launch_map import cpulist
from validation.model import Measurement
from validation.probes.lspci import parse_lspci_vvv
from validation.probes.nvidia_smi import GpuInfo, short_bus_id
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
