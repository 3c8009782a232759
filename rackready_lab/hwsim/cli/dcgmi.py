"""dcgmi stand-in (datacenter-gpu-manager-4): discovery -l, diag -r 1|2|3 [-j],
group -c NAME --default|--defaultnvswitches / -d ID, health [-g ID] -s FLAGS [-u S] /
-c [-j].

Results follow the state: each fault fails the test that would catch it on
real hardware (e.g. ECC -> memory, PCIe downtrain -> pcie). DCGM's view: a GPU marked
`dcgm_unseen` (a GPU the host engine cannot attach to) is left out of discovery and of
the default group; the health watches report a GPU's volatile double-bit ECC errors as
a Memory system Failure (DcgmHealthWatch's rule) and the incidents listed in its
`dcgm_incidents`. The stand-in keeps no DCGM state between calls: a fresh host engine's
groups (0 all GPUs, 1 all NVSwitches), a created group is 2 (GPUs) or 3 (NVSwitches),
and a check is answered whether or not watches were set.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .common import ToolError, load_state, run, smi_bus_id, visible_gpus

USAGE = ("Usage: dcgmi <discovery -l | diag -r 1|2|3 [-j] | group -c NAME [--default|"
         "--defaultnvswitches] | group -d ID | health [-g ID] -s FLAGS [-u S] | "
         "health [-g ID] -c [-j]>")
# a fresh host engine's groups, and the ids the stand-in gives the groups it creates
GPU_GROUPS = ("0", "2")
SWITCH_GROUPS = ("1", "3")
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


HEALTH_WORDS = {"pass": "Healthy", "warn": "Warning", "fail": "Failure"}
_RANK = {"pass": 0, "warn": 1, "fail": 2}


def incidents(state: dict[str, Any], group: str) -> dict[tuple[str, int], list[dict[str, str]]]:
    """(entity group, id) -> [{system, health, message}] for the group's entities."""
    out: dict[tuple[str, int], list[dict[str, str]]] = {}
    if group in GPU_GROUPS:
        for i, g in dcgm_gpus(state):
            found = []
            dbe = sum(v for k, v in g["ecc"]["volatile"].items() if "uncorrectable" in k)
            if dbe:  # DcgmHealthWatch: DCGM_FR_VOLATILE_DBE_DETECTED, a Failure
                found.append({"system": "Memory system", "health": "fail",
                              "message": f"Detected {dbe} volatile double-bit ECC error(s) "
                                         f"in GPU {i}."})
            found += g.get("dcgm_incidents", [])
            if found:
                out[("GPU", i)] = found
    else:
        for sw in dcgm_switches(state):
            if sw.get("dcgm_incidents"):
                out[("Switch", sw["index"])] = sw["dcgm_incidents"]
    return out


def chunks(msg: str, width: int = 54) -> list[str]:
    """Health.cpp AddErrorMessage: a message cut into rows of <= 54 characters at the
    last word boundary (a space, or before '.', ',', '/')."""
    msg = msg.replace("\n", " ")
    if len(msg) <= width:
        return [msg]
    out, p, start = [], 0, 0
    while start < len(msg):
        p += width
        if p >= len(msg):
            p = len(msg) - 1
        elif p != len(msg) - 1:
            while msg[p] != " " and msg[p + 1] not in " .,/":
                p -= 1
            while msg[p] == " ":
                p -= 1
        while start < len(msg) and msg[start] == " ":
            start += 1
        if start >= len(msg):
            break
        out.append(msg[start:p + 1])
        start = p + 2
    return out


def _tree(state: dict[str, Any], group: str) -> tuple[str, dict[str, Any]]:
    """(overall health, DcgmiOutput body) as Health.cpp GenerateOutputFromResponse builds
    it: entity group -> entity -> Errors -> system, several incidents of one system joined
    with ', ' and their worst health kept."""
    body: dict[str, Any] = {}
    overall = "pass"
    for (egroup, eid), found in incidents(state, group).items():
        systems: dict[str, dict[str, Any]] = {}
        for inc in found:
            cur = systems.setdefault(inc["system"], {"health": "pass", "msgs": []})
            cur["msgs"].append(inc["message"])
            if _RANK[inc["health"]] > _RANK[cur["health"]]:
                cur["health"] = inc["health"]
        worst = max((v["health"] for v in systems.values()), key=_RANK.__getitem__)
        if _RANK[worst] > _RANK[overall]:
            overall = worst
        body.setdefault(egroup, {"children": {}})["children"][str(eid)] = {
            "value": HEALTH_WORDS[worst],
            "children": {"Errors": {"children": {
                name: {"value": HEALTH_WORDS[v["health"]],
                       "overflow": chunks(", ".join(v["msgs"]))}
                for name, v in systems.items()}}}}
    return overall, body


def health_json(state: dict[str, Any], group: str) -> str:
    """`dcgmi health -c -j`: jsoncpp's styled writer (tabs, ' : ', keys sorted)."""
    overall, body = _tree(state, group)
    doc = {"body": {"Overall Health": {"value": HEALTH_WORDS[overall]}, **body},
           "header": ["Health Monitor Report"]}
    return json.dumps(doc, indent="\t", separators=(",", " : "), sort_keys=True) + "\n"


def health(state: dict[str, Any], group: str = "0") -> str:
    """`dcgmi health -c`: DcgmiOutputTree(28, 60), the same tree as boxed rows."""
    overall, body = _tree(state, group)
    edge = "+" + "-" * 27 + "+" + "-" * 58 + "+"

    def row(left: str, right: str) -> str:
        return f"| {left:<25} | {right:<56} |"

    out = [edge, f"| {'Health Monitor Report':<85}|", edge.replace("-", "="),
           row("Overall Health", HEALTH_WORDS[overall])]
    for egroup, ents in body.items():
        out.append(row(egroup, ""))
        for eid, ent in ents["children"].items():
            out += [row(f"-> {eid}", ent["value"]), row("   -> Errors", "")]
            for name, sysbox in ent["children"]["Errors"]["children"].items():
                out.append(row(f"      -> {name}", sysbox["value"]))
                out += [row("", line) for line in sysbox["overflow"]]
    out.append(edge)
    return "\n".join(out) + "\n"


def _group_of(argv: list[str]) -> str:
    if "-g" in argv:
        i = argv.index("-g")
        if i + 1 < len(argv):
            return argv[i + 1]
        raise ToolError(USAGE, 1)
    return "0"


def group_command(argv: list[str]) -> str:
    if argv[:1] == ["-c"] and len(argv) in (2, 3) and argv[2:] in (
            [], ["--default"], ["--defaultnvswitches"]):
        gid = "3" if argv[2:] == ["--defaultnvswitches"] else "2"
        return f'Successfully created group "{argv[1]}" with a group ID of {gid}\n'
    if argv[:1] == ["-d"] and len(argv) == 2 and argv[1].isdigit():
        return f"Successfully removed group {argv[1]}\n"
    raise ToolError(USAGE, 1)


def health_command(state: dict[str, Any], argv: list[str]) -> str:
    group = _group_of(argv)
    rest = [a for i, a in enumerate(argv) if a != "-g" and (i == 0 or argv[i - 1] != "-g")]
    if group not in GPU_GROUPS + SWITCH_GROUPS:
        raise ToolError("Error: Unable to check health watches. Return: The Group is not found",
                        1)
    if rest[:1] == ["-s"] and len(rest) in (2, 4) and (len(rest) == 2 or rest[2] == "-u"):
        return "Health monitor systems set successfully.\n"
    if rest == ["-c", "-j"]:
        return health_json(state, group)
    if rest == ["-c"]:
        return health(state, group)
    raise ToolError(USAGE, 1)


def dcgm_gpus(state: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(DCGM GPU id, GPU) for the GPUs the host engine attached to: the driver's order,
    a GPU it cannot attach to left out (its id is not reused)."""
    return [(i, g) for i, g in enumerate(visible_gpus(state)) if not g.get("dcgm_unseen")]


def dcgm_switches(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in state["nvswitches"] if s.get("present", True)]


def discovery(state: dict[str, Any]) -> str:
    gpus = dcgm_gpus(state)
    sep = "+--------+----------------------------------------------------------------------+"
    out = [f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} found.", sep,
           "| GPU ID | Device Information                                                   |", sep]
    for i, g in gpus:
        out += [f"| {i:<6} | {'Name: ' + g['name']:<68} |",
                f"|        | {'PCI Bus ID: ' + smi_bus_id(g['bdf']):<68} |",
                f"|        | {'Device UUID: ' + g['uuid']:<68} |", sep]
    sw = dcgm_switches(state)
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
    elif argv[:1] in (["health"], ["group"]) and len(argv) > 1:
        command = argv[0]
    else:
        raise ToolError(USAGE, 1)
    if not state["services"].get("nvidia-dcgm", {}).get("running"):
        raise ToolError(NO_HOSTENGINE, 255)
    if command == "discovery":
        sys.stdout.write(discovery(state))
        return 0
    if command == "group":
        sys.stdout.write(group_command(argv[1:]))
        return 0
    if command == "health":
        sys.stdout.write(health_command(state, argv[1:]))
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
