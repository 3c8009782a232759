"""PCIe AER counters (GPUs and compute NICs), IB/RoCE link flaps, transceivers (mlxlink).

Totals are judged when the check runs (before the workloads); the change during the run
is judged by health.delta, which reads `delta_counters` at the start and the end.
"""

from __future__ import annotations

from collections.abc import Iterator

from validation.checks.common import gpu_labels, m, rdma_devices, smi
from validation.checks.network import IB_CLASS, ca_address, ibstat
from validation.checks.registry import CommandFailed, Context, check
from validation.model import Measurement
from validation.probes.aer import read_aer
from validation.probes.mlxlink import parse_mlxlink
from validation.probes.nvidia_smi import short_bus_id

# per-port counters whose increase is a flap (judged one by one, naming the port)
FLAP_COUNTERS = {"link_downed": "ib_link_downed", "link_error_recovery": "ib_link_recovery"}


def compute_nics(ctx: Context) -> list[tuple[str, str]]:
    """(RDMA device, PCI address) of the compute NICs, from sysfs (no tool needed)."""
    base = ctx.path(IB_CLASS)
    wanted = rdma_devices(ctx)
    out = []
    for ca in sorted(base.iterdir()) if base.is_dir() else ():
        addr = ca_address(ctx, ca.name)
        if addr and (wanted is None or addr in wanted):
            out.append((ca.name, addr))
    return out


def aer_by_device(ctx: Context) -> Iterator[tuple[dict[str, str], dict[str, int]]]:
    """(labels naming the part, {severity: total}) per GPU and compute NIC with AER files."""
    pci = ctx.path("/sys/bus/pci/devices")
    for g in smi(ctx).gpus:
        counts = read_aer(pci / short_bus_id(g.bus_id))
        if counts:
            yield gpu_labels(g), {sev: c.total for sev, c in counts.items()}
    for ca, addr in compute_nics(ctx):
        counts = read_aer(pci / addr)
        if counts:
            yield {"nic": ca, "bus_id": addr}, {sev: c.total for sev, c in counts.items()}


def port_counters(ctx: Context) -> Iterator[tuple[str, str, dict[str, int]]]:
    """(device, port, {counter: value}) of the compute ports' flap counters."""
    for ca, _ in compute_nics(ctx):
        ports = ctx.path(f"{IB_CLASS}/{ca}/ports")
        for port in sorted(ports.iterdir()) if ports.is_dir() else ():
            vals = {}
            for name in FLAP_COUNTERS:
                try:
                    vals[name] = int((port / "counters" / name).read_text().strip())
                except (OSError, ValueError):
                    continue
            yield ca, port.name, vals


def delta_counters(ctx: Context) -> Iterator[tuple[str, dict[str, str], float]]:
    """(health counter, labels, value) for health.delta: AER totals and port flaps."""
    for labels, totals in aer_by_device(ctx):
        for sev, total in totals.items():
            yield f"aer_{sev}", labels, total
    for ca, port, vals in port_counters(ctx):
        for name, value in vals.items():
            yield FLAP_COUNTERS[name], {"nic": ca, "port": port}, value


@check("pcie.aer", emits=("pcie.aer_correctable", "pcie.aer_nonfatal", "pcie.aer_fatal"),
       # the kernel's AER counters of the host's devices: a VM's guest may have none
       metric_needs={f"pcie.aer_{s}": ("bare-metal",) for s in ("correctable", "nonfatal",
                                                                 "fatal")},
       needs=("gpu",), timeout_s=60,
       title="PCIe AER error totals since boot on every GPU and compute NIC (sysfs aer_dev_*)")
def pcie_aer(ctx: Context) -> Iterator[Measurement]:
    for labels, totals in aer_by_device(ctx):
        for sev, total in totals.items():
            yield m(f"pcie.aer_{sev}", total, labels)


def _mlxlink(ctx: Context, dev: str, artifact: str) -> str:
    try:
        return ctx.run(["mlxlink", "-d", dev, "-m", "-c", "-e"], timeout_s=60, artifact=artifact)
    except CommandFailed:
        # some link modes refuse the eye query (-e); module and BER are what is judged
        return ctx.run(["mlxlink", "-d", dev, "-m", "-c"], timeout_s=60, artifact=artifact)


@check("network.transceiver",
       emits=("transceiver.module", "transceiver.optical", "transceiver.temperature",
              "transceiver.rx_power_dbm", "transceiver.effective_ber", "transceiver.raw_ber"),
       needs=("rdma",), timeout_s=300,
       title="transceiver/cable per compute port: module temperature, rx power per lane, "
             "effective and raw BER (mlxlink -m -c -e)")
def network_transceiver(ctx: Context) -> Iterator[Measurement]:
    for ca in ibstat(ctx):
        dev = ca_address(ctx, ca.name) or ca.name
        name = f"mlxlink-{ca.name}.txt"
        rep = parse_mlxlink(_mlxlink(ctx, dev, name))
        cable = " ".join(x for x in (rep.part_number, f"serial {rep.serial}"
                                     if rep.serial else None) if x) or "unknown"
        lab = {"nic": ca.name, "port": "1", "cable": cable}
        art = f"artifacts/{name}"
        yield m("transceiver.module", f"{rep.identifier or '?'} {rep.cable_type or '?'}",
                {**lab, "vendor": rep.vendor or "unknown"}, art)
        # a fact: a copper cable has no laser to report on (no temperature, no rx power)
        yield m("transceiver.optical", "optical" in (rep.cable_type or "").lower(), lab, art)
        if rep.temperature_c is not None:
            yield m("transceiver.temperature", rep.temperature_c, lab, art)
        for lane, dbm in enumerate(rep.rx_power_dbm):
            yield m("transceiver.rx_power_dbm", dbm, {**lab, "lane": str(lane)}, art)
        if rep.effective_ber is not None:
            yield m("transceiver.effective_ber", rep.effective_ber, lab, art)
        if rep.raw_ber is not None:
            yield m("transceiver.raw_ber", rep.raw_ber, lab, art)


