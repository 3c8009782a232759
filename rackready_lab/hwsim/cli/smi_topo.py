"""`nvidia-smi topo -m` and `nvidia-smi nvlink -s/-e/-c` from the state.

Line formats follow the capture (tabs, the underline escape around the
header, the legend); NIC rows and the NIC legend follow the tool's documented
layout for hosts with ConnectX adapters.
"""

from __future__ import annotations

from typing import Any

from .common import read_capture

Gpu = dict[str, Any]


def _active_links(g: Gpu, peer: str | None = None) -> int:
    return sum(1 for link in g["nvlinks"] if link["up"] and (peer is None or link["peer"] == peer))


def gpu_pair(state: dict[str, Any], a: Gpu, b: Gpu) -> str:
    if a is b:
        return " X "
    if state["nvswitches"]:
        # Through NVSwitch every GPU reaches every other over all its working links.
        n = min(_active_links(a), _active_links(b))
    else:
        n = min(_active_links(a, f"gpu:{b['index']}"), _active_links(b, f"gpu:{a['index']}"))
    if n:
        return f"NV{n}"
    return "NODE" if a["numa"] == b["numa"] else "SYS"


def _pci_pair(a: dict[str, Any], b: dict[str, Any], same_switch: bool) -> str:
    if same_switch:
        return "PXB"
    return "NODE" if a["numa"] == b["numa"] else "SYS"


def render_topo(state: dict[str, Any], gpus: list[Gpu]) -> str:
    nics = [n for n in state["nics"] if n.get("present", True)]
    names = [f"GPU{i}" for i in range(len(gpus))] + [f"NIC{i}" for i in range(len(nics))]
    head = "\t\x1b[4m" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    lines = [head + "\x1b[0m"]
    cpus = {n["node"]: n["cpus"] for n in state["cpu"]["numa"]}
    for i, g in enumerate(gpus):
        cells = [gpu_pair(state, g, h) for h in gpus]
        cells += [_pci_pair(g, n, n.get("gpu") == g["index"]) for n in nics]
        lines.append("\t".join([f"GPU{i}", *cells, cpus[g["numa"]], str(g["numa"]), "", "N/A"]))
    for k, n in enumerate(nics):
        cells = [_pci_pair(n, g, n.get("gpu") == g["index"]) for g in gpus]
        cells += [" X " if m is n else _pci_pair(n, m, False) for m in nics]
        lines.append("\t".join([f"NIC{k}", *cells]))
    capture = read_capture("nvidia-smi-topo-m.txt")
    legend = capture[capture.index("\nLegend:"):].rstrip("\n")
    lines.append(legend)
    if nics:
        lines.append("\nNIC Legend:\n")
        lines += [f"  NIC{k}: {n['name']}" for k, n in enumerate(nics)]
    return "\n".join(lines) + "\n\n" if nics else "\n".join(lines) + "\n"


def _title(i: int, g: Gpu) -> str:
    return f"GPU {i}: {g['name']} (UUID: {g['uuid']})"


def render_nvlink(gpus: list[tuple[int, Gpu]], mode: str) -> str:
    out: list[str] = []
    for i, g in gpus:
        out.append(_title(i, g))
        for link in g["nvlinks"]:
            n = link["link"]
            if mode == "s":
                speed = f"{link['gbps']:.3f} GB/s" if link["up"] else "<inactive>"
                out.append(f"\t Link {n}: {speed}")
            elif mode == "e":
                out += [f"\t Link {n}: Replay Errors: {link['replay']}",
                        f"\t Link {n}: Recovery Errors: {link['recovery']}",
                        f"\t Link {n}: CRC Errors: {link['crc']}", ""]
            else:
                up = "true" if link["up"] else "false"
                for cap in ("P2P is supported", "Access to system memory supported",
                            "P2P atomics supported", "System memory atomics supported",
                            "SLI is supported", "Link is supported"):
                    out.append(f"\t Link {n}, {cap}: {up}")
    return "\n".join(out) + "\n"
