"""`dcgmi diag -r N -j` (DCGM's JSON diagnostic report), one result per plugin and GPU.

Shapes (keys from DCGM's nvvs/include/NvvsJsonStrings.h):
- DCGM 4: {"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"|"Fail"|"Skip"|"Warn",
  "warnings": [{"warning": ...}], "info": ...}], "test_summary": {"status"}}]}]}, ...};
- DCGM 3: the same under "DCGM GPU Diagnostic", each result naming "gpu_id" (or a
  "gpu_ids" list "0,1,2") instead of entity_id.
A result with no GPU (a system-wide test such as software's denylist) is kept with gpu "all".
DCGM 3's writer (jsoncpp arrays filled by index) leaves `null` where a category, test,
result or warning was never filled in (a test not run at that level, a GPU not in the
group): a null is no entry and is skipped; the entries around it are read as usual.
Anything else raises ParseError("unparsed ..."), never an empty pass: a diagnostic whose
entries are all null has no results and is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from validation.probes.nvidia_smi import ParseError

STATUSES = ("Pass", "Fail", "Skip", "Warn")
_ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")


@dataclass(frozen=True)
class DiagResult:
    category: str
    plugin: str
    gpu: str  # GPU index as dcgmi numbers it, or "all"
    status: str  # Pass | Fail | Skip | Warn
    warnings: tuple[str, ...] = ()


def _status(raw: object) -> str:
    s = str(raw).strip().capitalize()  # DCGM 2 wrote PASS/FAIL
    if s not in STATUSES:
        raise ParseError(f"unparsed dcgmi diag JSON: unknown status {raw!r}")
    return s


def _gpus(res: dict[str, object]) -> list[str]:
    if "entity_id" in res:
        if str(res.get("entity_group", "GPU")) != "GPU":
            return []  # CPU or switch entities: not this check's GPUs
        return [str(res["entity_id"])]
    for key in ("gpu_id", "gpu_ids"):
        if key in res:
            ids = [g.strip() for g in str(res[key]).split(",") if g.strip()]
            return ids or ["all"]
    return ["all"]


def _entries(items: object) -> list[Any]:
    """A JSON list's entries without its nulls (DCGM 3's unfilled slots)."""
    if not isinstance(items, list):
        raise ParseError(f"unparsed dcgmi diag JSON: {type(items).__name__} where a list is")
    return [i for i in items if i is not None]


def parse_diag_json(text: str) -> list[DiagResult]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"unparsed dcgmi diag JSON: {exc}") from None
    root = next((doc[k] for k in _ROOTS if isinstance(doc, dict) and k in doc), None)
    if not isinstance(root, dict) or not isinstance(root.get("test_categories"), list):
        raise ParseError("unparsed dcgmi diag JSON: no 'DCGM Diagnostic' test_categories")
    out: list[DiagResult] = []
    try:
        for cat in _entries(root["test_categories"]):
            for test in _entries(cat["tests"]):
                for res in _entries(test.get("results") or []):
                    warns = tuple(str(w.get("warning", w)) if isinstance(w, dict) else str(w)
                                  for w in _entries(res.get("warnings") or []))
                    for gpu in _gpus(res):
                        out.append(DiagResult(str(cat["category"]), str(test["name"]), gpu,
                                              _status(res["status"]), warns))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ParseError(f"unparsed dcgmi diag JSON: missing {exc}") from None
    if not out:
        raise ParseError("unparsed dcgmi diag JSON: no test results")
    return out
