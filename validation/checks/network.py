"""IB/RoCE ports: state, rate, link layer, MTU; RoCE QoS (trust, DSCP map, PFC, ECN) and
firmware settings; nvidia-peermem and the ib_core it is bound to."""

from __future__ import annotations

import os
from collections.abc import Iterator

from validation.checks.common import m, rdma_devices
from validation.checks.registry import CheckSkipped, Context, check
from validation.model import Measurement
from validation.probes.rdma import (
    IbCa,
    mlxconfig_number,
    parse_ib_counters,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_mlnx_qos,
    parse_mlxconfig_columns,
)
from validation.probes.system import parse_modules
from validation.profile.site_limits import mlxconfig_wanted
from validation.workloads.common_env import roce_env

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


@check("network.ports",
       emits=("nic.count", "nic.model", "nic.firmware", "ib.port_state", "ib.phys_state",
              "ib.rate", "ib.link_layer", "ib.active_mtu"),
       needs=("rdma",), timeout_s=60,
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


@check("network.roce_qos",
       emits=("roce.trust", "roce.dscp_priority", "roce.pfc_priority_enabled",
              "roce.pfc_other_priorities", "roce.ecn_np_enabled", "roce.ecn_rp_enabled",
              "nic.mlxconfig", "nic.mlxconfig_pending", "nccl.ib_tc", "nccl.ib_gid_index"),
       needs=("roce",), timeout_s=60,
       title="RoCE QoS: trust, DSCP->priority, PFC and ECN on the RoCE priority (mlnx_qos, "
             "sysfs); firmware settings (mlxconfig)")
def network_roce_qos(ctx: Context) -> Iterator[Measurement]:
    for key in ("rdma_network_roce_priority", "rdma_network_roce_dscp"):
        if key not in ctx.site:
            raise RuntimeError(f"site file lacks {key} (the controller derives it from the "
                               "inventory)")
    prio = int(ctx.site["rdma_network_roce_priority"])
    dscp = int(ctx.site["rdma_network_roce_dscp"])
    wanted = mlxconfig_wanted(ctx.site)
    seen = False
    for ca in ibstat(ctx):
        if not any(p.link_layer == "Ethernet" for p in ca.ports):
            continue
        for ifname in netdevs(ctx, ca.name):
            seen = True
            qos = parse_mlnx_qos(ctx.run(["mlnx_qos", "-i", ifname], timeout_s=30,
                                         artifact=f"mlnx_qos-{ifname}.txt"))
            lab = {"nic": ca.name, "netdev": ifname}
            on_prio = {**lab, "priority": str(prio)}
            yield m("roce.trust", qos.trust, lab)
            if qos.trust == "dscp":  # the map is shown, and used, under trust dscp only
                got = qos.dscp2prio.get(dscp)
                yield m("roce.dscp_priority", got if got is not None else -1,
                        {**lab, "dscp": str(dscp)}, artifact=f"artifacts/mlnx_qos-{ifname}.txt")
            yield m("roce.pfc_priority_enabled", prio in qos.pfc_enabled, on_prio)
            yield m("roce.pfc_other_priorities", len(set(qos.pfc_enabled) - {prio}), lab)
            for metric, point in (("roce.ecn_np_enabled", "roce_np"),
                                  ("roce.ecn_rp_enabled", "roce_rp")):
                yield m(metric, ecn_enabled(ctx, ifname, point, prio), on_prio)
        yield from firmware_settings(ctx, ca.name, wanted)
    if not seen:
        raise CheckSkipped("no Ethernet-link-layer RDMA port with a netdev")
    # what every NCCL workload of this run is given (validation.workloads.common_env)
    env = roce_env(ctx.site)
    yield m("nccl.ib_tc", int(env["NCCL_IB_TC"]))
    yield m("nccl.ib_gid_index", int(env["NCCL_IB_GID_INDEX"]))


def ecn_enabled(ctx: Context, ifname: str, point: str, prio: int) -> bool:
    """mlx5's per-priority ECN switch, /sys/class/net/<if>/ecn/<roce_np|roce_rp>/enable/<p>
    ("1" on); a port without the file (no mlx5 ECN sysfs) reads as off."""
    try:
        return ctx.read(f"/sys/class/net/{ifname}/ecn/{point}/enable/{prio}").strip() == "1"
    except OSError:
        return False


def firmware_settings(ctx: Context, ca: str, wanted: dict[str, int | str]
                      ) -> Iterator[Measurement]:
    """The role's firmware settings on one ConnectX: the value in effect (Current) of each,
    and how many wait for a reboot (Next Boot differs)."""
    dev = ca_address(ctx, ca) or ca
    cols = parse_mlxconfig_columns(ctx.run(["mlxconfig", "-d", dev, "-e", "q", *wanted],
                                           timeout_s=30, artifact=f"mlxconfig-{ca}.txt"))
    lab = {"nic": ca, "bus_id": dev}
    pending = 0
    for param in wanted:
        c = cols.get(param, {})
        cur = c.get("Current", c.get("Next Boot", ""))
        num = mlxconfig_number(cur)
        yield m("nic.mlxconfig", num if num is not None else (cur or "absent"),
                {**lab, "param": param}, artifact=f"artifacts/mlxconfig-{ca}.txt")
        pending += int("Next Boot" in c and c["Next Boot"] != cur)
    yield m("nic.mlxconfig_pending", pending, lab)


@check("network.peermem",
       emits=("kernel.module_loaded", "peermem.ib_core_linked", "kernel.module_current",
              "kernel.module_sysfs"),
       needs=("rdma", "gpu"), timeout_s=15,
       title="nvidia-peermem loaded (GPUDirect RDMA), bound to the ib_core in use")
def network_peermem(ctx: Context) -> Iterator[Measurement]:
    mods = parse_modules(ctx.read("/proc/modules"))
    yield m("kernel.module_loaded", "nvidia_peermem" in mods, {"module": "nvidia_peermem"})
    if "nvidia_peermem" not in mods:
        return
    # peermem registers with ib_core's peer-memory API: the module that resolved those
    # symbols is the ib_core that lists it as a user (a symbol-version mismatch with a
    # different ib_core would have refused the load: "disagrees about version of symbol")
    users = _module_users(ctx.read("/proc/modules"))
    yield m("peermem.ib_core_linked", "nvidia_peermem" in users.get("ib_core", ()),
            {"module": "nvidia_peermem", "ib_core_users": ",".join(users.get("ib_core", ()))})
    # the loaded modules are the files installed now: DOCA's ib_core, a peermem rebuilt
    # after it. Where sysfs or modinfo cannot say, nothing is measured (not a pass).
    for mod in ("ib_core", "nvidia_peermem"):
        # a fact: a loaded module always has /sys/module/<m>; only a simulated
        # /proc/modules (the lab's) lists one the kernel's sysfs lacks
        yield m("kernel.module_sysfs", ctx.exists(f"/sys/module/{mod}"), {"module": mod})
        loaded, installed = _srcversion(ctx, mod)
        if loaded and installed:
            yield m("kernel.module_current", loaded == installed,
                    {"module": mod, "loaded": loaded, "installed": installed})


def _module_users(text: str) -> dict[str, tuple[str, ...]]:
    """/proc/modules "name size refcount users state addr": {name: users}."""
    out = {}
    for ln in text.splitlines():
        f = ln.split()
        if len(f) >= 4:
            out[f[0]] = tuple(u for u in f[3].split(",") if u and u != "-")
    return out


def _srcversion(ctx: Context, mod: str) -> tuple[str | None, str | None]:
    """(srcversion of the loaded module, of the file modprobe would load now)."""
    try:
        loaded = ctx.read(f"/sys/module/{mod}/srcversion").strip() or None
    except OSError:
        return None, None
    try:
        installed = ctx.run(["modinfo", "-F", "srcversion", mod], timeout_s=10).strip() or None
    except Exception:  # noqa: BLE001  no modinfo (or no such file): not measured
        installed = None
    return loaded, installed


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
