"""Parsers for the RDMA tools: ibstat, ibv_devinfo, mlxconfig q, mlnx_qos.

Written from the tools' documented output formats (none of these ran on the
captured machine)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from validation.probes.nvidia_smi import ParseError

# PCI device id (ibstat "CA type: MT4129") -> product family
CA_MODELS = {
    "4119": "ConnectX-5", "4121": "ConnectX-5 Ex", "4123": "ConnectX-6", "4125": "ConnectX-6 Dx",
    "4127": "ConnectX-6 Lx", "4129": "ConnectX-7", "4131": "ConnectX-8",
    "41686": "BlueField-2", "41692": "BlueField-3",
}


@dataclass(frozen=True)
class IbPort:
    ca: str
    port: int
    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    link_layer: str | None


@dataclass(frozen=True)
class IbCa:
    name: str
    ca_type: str
    model: str
    firmware: str | None
    ports: tuple[IbPort, ...] = field(default_factory=tuple)


def parse_ibstat(text: str) -> list[IbCa]:
    """`ibstat`: one block per CA ('CA 'mlx5_0''), ports nested beneath."""
    cas: list[IbCa] = []
    blocks = re.split(r"^CA '([^']+)'\s*$", text, flags=re.M)
    if len(blocks) < 3:
        if text.strip():
            raise ParseError("ibstat: no CA 'name' header")
        return []
    for name, body in zip(blocks[1::2], blocks[2::2], strict=True):
        head, *port_parts = re.split(r"^\s*Port (\d+):\s*$", body, flags=re.M)
        f: dict[str, str] = dict(re.findall(r"^\s*([\w ]+?):\s*(.*?)\s*$", head, re.M))
        ca_type = f.get("CA type", "")
        dev = re.sub(r"^MT", "", ca_type)
        ports = []
        for num, pbody in zip(port_parts[0::2], port_parts[1::2], strict=True):
            p = dict(re.findall(r"^\s*([\w ]+?):\s*(.*?)\s*$", pbody, re.M))
            rate = re.match(r"[\d.]+", p.get("Rate", ""))
            ports.append(IbPort(ca=name, port=int(num), state=p.get("State"),
                                phys_state=p.get("Physical state"),
                                rate_gbps=float(rate.group()) if rate else None,
                                link_layer=p.get("Link layer")))
        cas.append(IbCa(name=name, ca_type=ca_type, model=CA_MODELS.get(dev, ca_type),
                        firmware=f.get("Firmware version"), ports=tuple(ports)))
    return cas


def parse_ibv_devinfo(text: str) -> dict[str, dict[int, dict[str, str]]]:
    """`ibv_devinfo`: {hca: {port: {field: value}}}; the '(n)' enum suffix is dropped.

    Device-level fields are kept under port 0.
    """
    out: dict[str, dict[int, dict[str, str]]] = {}
    hca: str | None = None
    port = 0
    for ln in text.splitlines():
        m = re.match(r"^hca_id:\s*(\S+)", ln)
        if m:
            hca, port = m.group(1), 0
            out[hca] = {0: {}}
            continue
        m = re.match(r"^\s+port:\s*(\d+)", ln)
        if m and hca:
            port = int(m.group(1))
            out[hca][port] = {}
            continue
        m = re.match(r"^\s+(\w+):\s*(.*?)\s*$", ln)
        if m and hca:
            out[hca][port][m.group(1)] = re.sub(r"\s*\(\d+\)$", "", m.group(2))
    if text.strip() and not out:
        raise ParseError("ibv_devinfo: no hca_id line")
    return out


def parse_mlxconfig(text: str) -> dict[str, str]:
    """`mlxconfig -d DEV q`: {PARAM: value}, from the Configurations table."""
    if "Configurations:" not in text:
        raise ParseError("mlxconfig q: no Configurations: section")
    body = text.split("Configurations:", 1)[1]
    out = {}
    for ln in body.splitlines():
        m = re.match(r"^\s+\*?\s*([A-Z][A-Z0-9_]+(?:\[[^\]]*\])?)\s+(\S+)", ln)
        if m:
            out[m.group(1)] = m.group(2)
    return out


@dataclass(frozen=True)
class QosConfig:
    trust: str | None
    pfc_enabled: tuple[int, ...]  # priorities 0..7 with PFC on


def parse_mlnx_qos(text: str) -> QosConfig:
    """`mlnx_qos -i IF`: trust state and the PFC 'enabled' row."""
    trust = re.search(r"Priority trust state:\s*(\S+)", text)
    m = re.search(r"PFC configuration:.*?\n\s*priority((?:\s+\d)+)\s*\n\s*enabled((?:\s+\d)+)",
                  text, re.S)
    if not m:
        raise ParseError("mlnx_qos: no PFC configuration table")
    prios = [int(x) for x in m.group(1).split()]
    flags = [int(x) for x in m.group(2).split()]
    return QosConfig(trust=trust.group(1) if trust else None,
                     pfc_enabled=tuple(p for p, f in zip(prios, flags, strict=False) if f))


def parse_ib_counters(files: dict[str, str]) -> dict[str, int]:
    """sysfs port counters ({name: text}) -> {name: value}, skipping unreadable ones."""
    out = {}
    for name, text in files.items():
        try:
            out[name] = int(text.strip())
        except ValueError:
            continue
    return out
