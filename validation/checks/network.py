"""IB/RoCE ports: state, rate, link layer, MTU; RoCE QoS (trust, PFC); nvidia-peermem."""

from __future__ import annotations

import os
from collections.abc import Iterator

from validation.checks.common import m, rdma_devices
from validation.checks.registry import CheckSkipped, Context, check
from validation.model import Measurement
from validation.probes.rdma import (
    IbCa,
    parse_ib_counters,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_mlnx_qos,
)
from validation.probes.system import parse_modules

IB_CLASS = "/sys/class/infiniband"
# port counters whose increase means a bad cable, transceiver or switch port
IB_ERROR_COUNTERS = (
    "symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)


def ibstat(ctx: Context) -> list[IbCa]:
    def make() -> list[IbCa]:
        cas = parse_ibstat(ctx.run(["ibstat"], timeout_s=30, artifact="ibstat.txt"))
        wanted = rdma_devices(ctx)
        if wanted is not None:
            cas = [ca for ca in cas if ca_address(ctx, ca.name) in wanted]
        if not cas:
            raise CheckSkipped("ibstat lists no HCA")
        return cas
    return ctx.once("ibstat", make)


@check("network.ports", needs=("rdma",), timeout_s=60,
       title="RDMA NICs: count, model, port state, rate, link layer, active MTU")
def network_ports(ctx: Context) -> Iterator[Measurement]:
    cas = ibstat(ctx)
    yield m("nic.count", len(cas), artifact="artifacts/ibstat.txt")
    devinfo = parse_ibv_devinfo(ctx.run(["ibv_devinfo"], timeout_s=30,
                                        artifact="ibv_devinfo.txt"))
    for ca in cas:
        yield m("nic.model", f"{ca.model} ({ca.ca_type})", {"nic": ca.name})
        yield m("nic.firmware", ca.firmware, {"nic": ca.name})
        for p in ca.ports:
            lab = {"nic": ca.name, "port": str(p.port)}
            yield m("ib.port_state", p.state, lab)
            yield m("ib.phys_state", p.phys_state, lab)
            yield m("ib.rate", p.rate_gbps, lab)
            yield m("ib.link_layer", p.link_layer, lab)
            mtu = devinfo.get(ca.name, {}).get(p.port, {}).get("active_mtu")
            if mtu is not None:
                yield m("ib.active_mtu", int(mtu), lab)


def ca_address(ctx: Context, ca: str) -> str | None:
    """PCI address of an HCA, from the sysfs `device` link; None where sysfs lacks it."""
    dev = ctx.path(f"{IB_CLASS}/{ca}/device")
    return os.path.basename(os.path.realpath(dev)).lower() if dev.exists() else None


def netdevs(ctx: Context, ca: str) -> list[str]:
    d = ctx.path(f"{IB_CLASS}/{ca}/device/net")
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


@check("network.roce_qos", needs=("roce",), timeout_s=60,
       title="RoCE QoS: trust mode and PFC on the RoCE priority only (mlnx_qos)")
def network_roce_qos(ctx: Context) -> Iterator[Measurement]:
    if "rdma_network_roce_priority" not in ctx.site:
        raise RuntimeError("site file lacks rdma_network_roce_priority (the controller "
                           "derives it from the inventory)")
    prio = int(ctx.site["rdma_network_roce_priority"])
    seen = False
    for ca in ibstat(ctx):
        if not any(p.link_layer == "Ethernet" for p in ca.ports):
            continue
        for ifname in netdevs(ctx, ca.name):
            seen = True
            qos = parse_mlnx_qos(ctx.run(["mlnx_qos", "-i", ifname], timeout_s=30,
                                         artifact=f"mlnx_qos-{ifname}.txt"))
            lab = {"nic": ca.name, "netdev": ifname}
            yield m("roce.trust", qos.trust, lab)
            yield m("roce.pfc_priority_enabled", prio in qos.pfc_enabled,
                    {**lab, "priority": str(prio)})
            yield m("roce.pfc_other_priorities", len(set(qos.pfc_enabled) - {prio}), lab)
    if not seen:
        raise CheckSkipped("no Ethernet-link-layer RDMA port with a netdev")


@check("network.peermem", needs=("rdma", "gpu"), timeout_s=15,
       title="nvidia-peermem loaded (GPUDirect RDMA)")
def network_peermem(ctx: Context) -> Iterator[Measurement]:
    mods = parse_modules(ctx.read("/proc/modules"))
    yield m("kernel.module_loaded", "nvidia_peermem" in mods, {"module": "nvidia_peermem"})


def ib_error_counters(ctx: Context) -> dict[str, int]:
    """Sum of the error counters per port: {"mlx5_0/1": n}; {} where no IB class exists."""
    base = ctx.path(IB_CLASS)
    out: dict[str, int] = {}
    if not base.is_dir():
        return out
    for ca in sorted(base.iterdir()):
        ports = ca / "ports"
        for port in sorted(ports.iterdir()) if ports.is_dir() else ():
            files = {}
            for name in IB_ERROR_COUNTERS:
                try:
                    files[name] = (port / "counters" / name).read_text()
                except OSError:
                    continue
            out[f"{ca.name}/{port.name}"] = sum(parse_ib_counters(files).values())
    return out
