"""dcgmi stand-in (datacenter-gpu-manager-4): discovery -l, diag -r 1|2|3 [-j], health -c.

Results follow the state: each fault fails the test that would catch it on
real hardware (e.g. ECC -> memory, PCIe downtrain -> pcie).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .common import ToolError, load_state, run, smi_bus_id, visible_gpus

USAGE = "Usage: dcgmi <discovery -l | diag -r 1|2|3 [-j] | health -c>"
NO_HOSTENGINE = ("Error: unable to establish a connection to the specified host: localhost\n"
                 "Error: Unable to connect to host engine. Host engine connection "
                 "invalid/disconnected.")
DCGM_VERSION = "4.4.1"


def _row(left: str, right: str) -> str:
    return f"| {left:<25} | {right:<46} |"


def _rule(ch: str = "-") -> str:
    return "+" + ch * 27 + "+" + ch * 48 + "+"


def findings(state: dict[str, Any], level: int) -> dict[str, list[tuple[int, str]]]:
    """test name -> [(gpu index, warning)] for the tests this level runs."""
    gpus = visible_gpus(state)
    f: dict[str, list[tuple[int, str]]] = {}
    for i, g in enumerate(gpus):
        if g["remapped_rows"]["pending"]:
            f.setdefault("software", []).append((i, f"GPU {i} has pending row remappings"))
        if sum(v for k, v in g["ecc"]["volatile"].items() if "uncorrectable" in k):
            f.setdefault("memory", []).append((i, f"GPU {i} had an uncorrectable memory error"))
        if level >= 2 and g["pcie"]["width_cur"] < g["pcie"]["width_max"]:
            f.setdefault("pcie", []).append(
                (i, f"GPU {i} PCIe link width x{g['pcie']['width_cur']} below x"
                    f"{g['pcie']['width_max']}"))
        if level >= 2 and any(not link["up"] for link in g["nvlinks"]):
            f.setdefault("pcie", []).append((i, f"GPU {i} has NVLink down"))
        if level >= 3 and g["clocks_event_reasons"] & 0x68:
            f.setdefault("targeted_power", []).append(
                (i, f"GPU {i} clocks held back by thermal slowdown"))
    if any(g.get("lost") for g in state["gpus"]):
        f.setdefault("software", []).append((-1, "A GPU has fallen off the bus (XID 79)"))
    if state["nvswitches"] and not state["services"]["nvidia-fabricmanager"]["running"]:
        f.setdefault("software", []).append((-1, "Fabric manager is not running"))
    return f


def _tests(level: int) -> dict[str, list[str]]:
    """category -> plugins the level runs (DCGM 4 names: software, memory, pcie, ...)."""
    return {"Deployment": ["software"], "Hardware": ["memory"] if level >= 2 else [],
            "Integration": ["pcie"] if level >= 2 else [],
            "Stress": ["targeted_stress", "targeted_power", "memory_bandwidth"]
            if level >= 3 else []}


def diag_json(state: dict[str, Any], level: int) -> str:
    """`dcgmi diag -r N -j` in DCGM 4's shape (nvvs/include/NvvsJsonStrings.h keys):
    "DCGM Diagnostic" -> test_categories[] -> tests[] -> results[] per entity, each with
    entity_group/entity_group_id/entity_id/status and, when it failed, warnings[]."""
    gpus = visible_gpus(state)
    f = findings(state, level)
    cats = []
    for section, names in _tests(level).items():
        if not names:
            continue
        tests = []
        for name in names:
            issues = f.get(name, [])
            results = []
            for i, _g in enumerate(gpus):
                mine = [msg for j, msg in issues if j in (i, -1)]
                r: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1,
                                     "entity_id": i, "status": "Fail" if mine else "Pass"}
                if mine:
                    r["warnings"] = [{"error_category": 2, "error_id": 0, "error_severity": 2,
                                      "warning": msg} for msg in mine]
                results.append(r)
            overall = "Fail" if any(r["status"] == "Fail" for r in results) else "Pass"
            tests.append({"name": name, "results": results, "test_summary": {"status": overall}})
        cats.append({"category": section, "tests": tests})
    doc = {
        "DCGM Diagnostic": {"test_categories": cats},
        "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [
            {"entity_id": i, "serial_num": g.get("serial", ""), "device_id": g["device_id"]}
            for i, g in enumerate(gpus)]}],
        "metadata": {"DCGM Version": DCGM_VERSION,
                     "Driver Version Detected": state["driver"]["version"]},
    }
    return json.dumps(doc, indent=4) + "\n"


def diag(state: dict[str, Any], level: int) -> str:
    gpus = visible_gpus(state)
    tests = _tests(level)
    f = findings(state, level)
    out = ["Successfully ran diagnostic for group.", _rule(),
           "| Diagnostic                | Result                                         |",
           _rule("="),
           "|-----  Metadata  ----------+------------------------------------------------|",
           _row("DCGM Version", DCGM_VERSION), _row("Driver Version Detected",
                                                    state["driver"]["version"]),
           _row("GPU Device IDs Detected", ",".join(g["device_id"].lower() for g in gpus)[:46])]
    for section, names in tests.items():
        if not names:
            continue
        out.append(f"|-----  {section}  " + "-" * (18 - len(section)) + "+" + "-" * 48 + "|")
        for name in names:
            issues = f.get(name, [])
            if not issues:
                out.append(_row(name, "Pass"))
                continue
            bad = sorted({i for i, _ in issues if i >= 0})
            out.append(_row(name, "Fail" + (" - GPUs: " + ",".join(map(str, bad))
                                            if bad else "")))
            for i, msg in issues:
                out.append(_row(f"Warning: GPU {i}" if i >= 0 else "Warning", msg[:46]))
    out.append(_rule())
    return "\n".join(out) + "\n"


def health(state: dict[str, Any]) -> str:
    f = findings(state, 3)
    bad = {(i, m) for v in f.values() for i, m in v}
    edge = "+" + "-" * 27 + "+" + "-" * 58 + "+"
    out = [edge, f"| {'Health Monitor Report':<84} |", edge.replace("-", "="),
           f"| Overall Health            | {'Failure' if bad else 'Healthy':<56} |"]
    for i, msg in sorted(bad):
        out.append(f"| {'-> ' + (str(i) if i >= 0 else 'System'):<25} | {'Failure':<56} |")
        out.append(f"| {'':<25} | {msg[:56]:<56} |")
    out.append(edge)
    return "\n".join(out) + "\n"


def discovery(state: dict[str, Any]) -> str:
    gpus = visible_gpus(state)
    sep = "+--------+----------------------------------------------------------------------+"
    out = [f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} found.", sep,
           "| GPU ID | Device Information                                                   |", sep]
    for i, g in enumerate(gpus):
        out += [f"| {i:<6} | {'Name: ' + g['name']:<68} |",
                f"|        | {'PCI Bus ID: ' + smi_bus_id(g['bdf']):<68} |",
                f"|        | {'Device UUID: ' + g['uuid']:<68} |", sep]
    sw = [s for s in state["nvswitches"] if s.get("present", True)]
    out += [f"{len(sw)} NvSwitch{'es' if len(sw) != 1 else ''} found.", "+-----------+",
            "| Switch ID |", "+-----------+"]
    out += [f"| {s['index']:<9} |" for s in sw] + ["+-----------+"]
    out.append(f"{sum(1 for n in state['nics'] if n.get('present', True))} ConnectX found.")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    state = load_state()
    if argv[:1] == ["discovery"] and argv[1:] == ["-l"]:
        command = "discovery"
    elif (argv[:2] == ["diag", "-r"] and len(argv) in (3, 4) and argv[2] in ("1", "2", "3")
          and argv[3:] in ([], ["-j"])):
        command = "diag"
    elif argv == ["health", "-c"]:
        command = "health"
    else:
        raise ToolError(USAGE, 1)
    if not state["services"].get("nvidia-dcgm", {}).get("running"):
        raise ToolError(NO_HOSTENGINE, 255)
    if command == "discovery":
        sys.stdout.write(discovery(state))
        return 0
    if command == "health":
        text = health(state)
        sys.stdout.write(text)
        return 0
    if argv[3:] == ["-j"]:
        text = diag_json(state, int(argv[2]))
        sys.stdout.write(text)
        return 226 if '"Fail"' in text else 0
    text = diag(state, int(argv[2]))
    sys.stdout.write(text)
    return 226 if "Fail" in text else 0


if __name__ == "__main__":
    sys.exit(run(main))
