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
    """`mlxconfig -d DEV q`: {PARAM: value}, from the Configurations table.

    The value is the one the firmware runs: the "Current" column where the table has one
    (`mlxconfig -e q`: Default, Current, Next Boot), else the only column (plain `q` shows
    "Next Boot" alone)."""
    return {k: cols.get("Current", cols[next(iter(cols))]) if cols else ""
            for k, cols in parse_mlxconfig_columns(text).items()}


def parse_mlxconfig_columns(text: str) -> dict[str, dict[str, str]]:
    """`mlxconfig -d DEV [-e] q [PARAM..]`: {PARAM: {column: value}}, columns named by the
    Configurations header ("Next Boot"; with -e "Default", "Current", "Next Boot")."""
    if "Configurations:" not in text:
        raise ParseError("mlxconfig q: no Configurations: section")
    head, _, body = text.split("Configurations:", 1)[1].partition("\n")
    names = re.findall(r"Default|Current|Next Boot|New", head) or ["Next Boot"]
    out: dict[str, dict[str, str]] = {}
    for ln in body.splitlines():
        # a row marked '*' (next-boot value differs from the default) starts with it
        m = re.match(r"^\s*\*?\s+([A-Z][A-Z0-9_]+(?:\[[^\]]*\])?)\s+(\S.*?)\s*$", ln)
        if m:
            values = m.group(2).split()
            out[m.group(1)] = dict(zip(names[-len(values):] if len(values) <= len(names)
                                       else names, values, strict=False))
    return out


def mlxconfig_number(value: str) -> int | None:
    """An mlxconfig value as the number `set` takes: ETH(2) -> 2, True(1) -> 1, 8 -> 8."""
    m = re.fullmatch(r"(?:\S*\()?(\d+)\)?", value.strip())
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class QosConfig:
    trust: str | None
    pfc_enabled: tuple[int, ...]  # priorities 0..7 with PFC on
    dscp2prio: dict[int, int] = field(default_factory=dict)  # DSCP -> priority (trust dscp)


def parse_mlnx_qos(text: str) -> QosConfig:
    """`mlnx_qos -i IF`: trust state, the dscp2prio mapping (`prio:3 dscp:31,30,..,24,`
    lines, shown under trust dscp) and the PFC 'enabled' row."""
    trust = re.search(r"Priority trust state:\s*(\S+)", text)
    m = re.search(r"PFC configuration:.*?\n\s*priority((?:\s+\d)+)\s*\n\s*enabled((?:\s+\d)+)",
                  text, re.S)
    if not m:
        raise ParseError("mlnx_qos: no PFC configuration table")
    prios = [int(x) for x in m.group(1).split()]
    flags = [int(x) for x in m.group(2).split()]
    dscp2prio: dict[int, int] = {}
    for prio, dscps in re.findall(r"^\s*prio:\s*(\d+)\s+dscp:\s*([\d,\s]*?),?\s*$", text, re.M):
        for d in dscps.split(","):
            if d.strip():
                dscp2prio[int(d)] = int(prio)
    return QosConfig(trust=trust.group(1) if trust else None,
                     pfc_enabled=tuple(p for p, f in zip(prios, flags, strict=False) if f),
                     dscp2prio=dscp2prio)


def parse_ib_counters(files: dict[str, str]) -> dict[str, int]:
    """sysfs port counters ({name: text}) -> {name: value}, skipping unreadable ones."""
    out = {}
    for name, text in files.items():
        try:
            out[name] = int(text.strip())
        except ValueError:
            continue
    return out
