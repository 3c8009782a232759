"""`dcgmi health -c [-j]`: DCGM's health watches, read as incidents per entity and system.

dcgmi (dcgmi/Health.cpp GenerateOutputFromResponse, the same in DCGM 2.x, 3.x and 4.x)
prints the report through DcgmiOutput, a tree of boxes:
- JSON (`-j`, jsoncpp's styled writer): {"header": ["Health Monitor Report"], "body":
  {"Overall Health": {"value": "Healthy"|"Warning"|"Failure"}, "<entity group>" (DCGM's
  DcgmFieldsGetEntityGroupString: "GPU", "Switch", "CPU", ...): {"children": {"<entity
  id>": {"value": <entity health>, "children": {"Errors": {"children": {"<system>":
  {"value": <system health>, "overflow": [<the messages, cut at 54 characters on word
  boundaries>]}}}}}}}}}. A healthy node has "Overall Health" alone.
- text (no `-j`): the same tree as boxed rows, `| Overall Health | Healthy |`, then
  `| GPU |`, `| -> 0 | Failure |`, `|    -> Errors |`, `|       -> PCIe system | Failure |`,
  and the message rows under it (`|  | <chunk> |`).
Systems are Health.cpp's HelperSystemToString names ("PCIe system", "NVLINK system",
"Memory system", "SM system", "InfoROM system", "Thermal system", "Power system",
"Driver", "ConnectX system", "PMU system", "MCU system"); an NVSwitch system (fatal and
non-fatal) has no name there and prints "Internal error": kept as it is written. Several
incidents of one system on one entity come as one message joined with ", ".
Health words: Healthy (pass), Warning (warn), Failure (fail); "Internal error" (an unknown
result) is kept as `unknown` and judged as a failure by the check, never as a pass.
Anything else raises ParseError("unparsed ..."): no report, no overall health, an entity
without its health.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from validation.probes.nvidia_smi import ParseError

HEALTH = {"Healthy": "pass", "Warning": "warn", "Failure": "fail", "Internal error": "unknown"}
# DcgmFieldsGetEntityGroupString -> the part a technician looks for
ENTITY_GROUPS = {"GPU": "gpu", "Switch": "nvswitch", "CPU": "cpu", "ConnectX": "connectx",
                 "vGPU": "vgpu", "GPU_I": "gpu_instance", "GPU_CI": "compute_instance"}
OVERALL = "Overall Health"


@dataclass(frozen=True)
class Incident:
    entity: str  # gpu | nvswitch | cpu | connectx | ...
    entity_id: str  # DCGM's id of the entity (a GPU's DCGM id, an NVSwitch's switch id)
    system: str  # "PCIe system", "Memory system", ... as dcgmi names it
    health: str  # pass | warn | fail | unknown
    message: str


@dataclass(frozen=True)
class HealthReport:
    overall: str  # pass | warn | fail | unknown
    incidents: tuple[Incident, ...]
    # entity (kind, id) -> the entity's health line (its worst system)
    entities: dict[tuple[str, str], str]


def _health(raw: object, where: str) -> str:
    word = str(raw).strip()
    if word not in HEALTH:
        raise ParseError(f"unparsed dcgmi health output: {where} health {raw!r}")
    return HEALTH[word]


def _entity(group: str) -> str:
    return ENTITY_GROUPS.get(group, group.lower())


def parse_health_json(text: str) -> HealthReport:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"unparsed dcgmi health JSON: {exc}") from None
    body = doc.get("body") if isinstance(doc, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get(OVERALL), dict):
        raise ParseError("unparsed dcgmi health JSON: no body with 'Overall Health'")
    overall = _health(body[OVERALL].get("value"), "overall")
    incidents: list[Incident] = []
    entities: dict[tuple[str, str], str] = {}
    try:
        for group, box in body.items():
            if group == OVERALL:
                continue
            for eid, ent in (box.get("children") or {}).items():
                kind = _entity(group)
                entities[(kind, str(eid))] = _health(ent.get("value"), f"{group} {eid}")
                systems = ((ent.get("children") or {}).get("Errors") or {}).get("children") or {}
                for system, sbox in systems.items():
                    msg = " ".join(str(x).strip() for x in sbox.get("overflow") or [])
                    incidents.append(Incident(kind, str(eid), system,
                                              _health(sbox.get("value"), f"{group} {eid} {system}"),
                                              msg))
    except (AttributeError, TypeError) as exc:
        raise ParseError(f"unparsed dcgmi health JSON: {exc}") from None
    return HealthReport(overall, tuple(incidents), entities)


_ROW = re.compile(r"^\|\s(?P<left>.*?)\s*\|\s(?P<right>.*?)\s*\|$")


def parse_health_text(text: str) -> HealthReport:
    """The boxed tree (DcgmiOutputTree, 28/60 columns): level by the `-> ` indent."""
    if "Health Monitor Report" not in text:
        raise ParseError("unparsed dcgmi health output: no 'Health Monitor Report'")
    overall: str | None = None
    incidents: list[Incident] = []
    entities: dict[tuple[str, str], str] = {}
    group = entity = None
    current: dict[str, Any] | None = None
    found: list[dict[str, Any]] = []
    for ln in text.splitlines():
        row = _ROW.match(ln.strip())
        if not row:
            continue
        left, right = row.group("left"), row.group("right").strip()
        label = left.strip()
        if label == OVERALL:
            overall = _health(right, "overall")
        elif not label.startswith("->") and label:
            if label != "Health Monitor Report":
                group, current = label, None
        elif label.startswith("->"):
            name = label[2:].strip()
            depth = (len(left) - len(left.lstrip())) // 3  # 0: entity, 1: Errors, 2: system
            if depth == 0:
                if group is None:
                    raise ParseError(f"unparsed dcgmi health output: entity {name} in no group")
                entity, current = name, None
                entities[(_entity(group), name)] = _health(right, f"{group} {name}")
            elif depth == 1:  # the entity's "Errors" row
                current = None
            elif depth == 2 and group is not None and entity is not None:
                current = {"entity": _entity(group), "id": entity, "system": name,
                           "health": _health(right, f"{group} {entity} {name}"), "msg": []}
                found.append(current)
        elif current is not None and right:  # a message row under its system
            current["msg"].append(right)
    if overall is None:
        raise ParseError("unparsed dcgmi health output: no 'Overall Health' row")
    for f in found:
        incidents.append(Incident(f["entity"], f["id"], f["system"], f["health"],
                                  " ".join(f["msg"])))
    return HealthReport(overall, tuple(incidents), entities)
