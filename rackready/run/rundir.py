"""The run directory: the one module that reads and writes a validation run.

Layout (everything else goes through this module):

    <run>/run.json                the plan: run id, inventory, level, scope, the planned
                                  nodes with the profile and site each must meet
    <run>/<node>/events.jsonl     what the node streamed (untrusted)
    <run>/<node>/node.log         stderr and non-event output of the node (untrusted)
    <run>/<node>/result.json      the node's own result (untrusted, never rewritten)
    <run>/<node>/artifacts/       raw files fetched from the node (untrusted)
    <run>/<node>/session.json     the controller's record of the SSH session
    <run>/<node>/judgement.json   the controller's verdicts (rackready.decide.node)
    <run>/<node>/bmc.json         the controller's out-of-band record (rackready.steps.oob)
    <run>/report/                 reports (rackready.report)

Whatever the node sent is read here with caps, non-finite numbers and unknown
schema versions turned into recorded problems, never into exceptions.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict, cast

from rackready.errors import UserError
from rackready.remote import result_shape
from rackready.remote.result_shape import conform_result
from rackready.sanitize import has_control, has_surrogates, replace_surrogates, strip_control

RUN_FILE = "run.json"
REPORT_DIRNAME = "report"
# The rack-level step's folder (not a node folder: node names never start with "_"): its
# record, each group's remote output, and the rack's judgement (rackready.decide).
RACK_DIRNAME = "_rack"
RACK_FILE = "rack.json"
RACK_JUDGEMENT_FILE = "judgement.json"
# The node's result.json is refused above this size (the fetch caps it too).
MAX_RESULT_BYTES = 64 << 20
# result.json schema versions this controller knows how to judge.
KNOWN_RESULT_SCHEMAS = ("1.0",)


def sha256_file(path: Path) -> str:
    """A file's SHA-256, read in 1 MiB pieces (artifacts may be large)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_run_id(inventory: str) -> str:
    """Unique even for two runs started in the same second (random suffix)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}-{_safe(inventory)}"


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:40] or "run"


def _rack_name(text: str) -> str:
    """A rack group's or node's name as a file name under _rack/."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text) or "_"


class PlannedIdentity(TypedDict, total=False):
    """What the inventory says a node is (rackready.steps.validate), where it says it;
    checked against what the node reports (rackready.decide.integrity), never shipped to
    it. A host's name often differs from its inventory name, so none is assumed."""

    hostnames: list[str]
    gpu_serials: list[str]


@dataclass(frozen=True)
class PlannedNode:
    """What the controller asked of one node: the facts it is judged against."""

    name: str
    profile: str
    site: dict[str, Any] = field(default_factory=dict)
    without: tuple[str, ...] = ()
    identity: PlannedIdentity = field(default_factory=PlannedIdentity)


@dataclass
class Plan:
    run_id: str
    inventory: str | None
    level: str
    only: list[str] | None
    nodes: list[PlannedNode]
    started: str | None = None
    finished: str | None = None
    bundle_sha256: str | None = None
    operator: dict[str, Any] = field(default_factory=dict)
    resumed_at: list[str] = field(default_factory=list)
    # node -> the controller's token for its latest attempt: the node echoes it, so a
    # result replayed from another run (or attempt) is told apart (rackready.decide.integrity)
    nonces: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"] = [{**asdict(n), "without": list(n.without)} for n in self.nodes]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        nodes = []
        for n in d.get("nodes") or []:
            if isinstance(n, str):  # run.json of earlier versions listed names only
                n = {"name": n, "profile": ""}
            nodes.append(PlannedNode(str(n["name"]), str(n.get("profile") or ""),
                                     dict(n.get("site") or {}), tuple(n.get("without") or ()),
                                     # as the controller wrote it (none in earlier runs)
                                     cast(PlannedIdentity, dict(n.get("identity") or {}))))
        only = d.get("only")
        return cls(run_id=str(d["run_id"]), inventory=d.get("inventory"),
                   level=str(d.get("level") or "quick"),
                   only=[str(c) for c in only] if only else None, nodes=nodes,
                   started=d.get("started"), finished=d.get("finished"),
                   bundle_sha256=d.get("bundle_sha256"),
                   operator=dict(d.get("operator") or {}),
                   resumed_at=list(d.get("resumed_at") or []),
                   nonces={str(k): str(v) for k, v in (d.get("nonces") or {}).items()}
                   if isinstance(d.get("nonces"), dict) else {})

    def node(self, name: str) -> PlannedNode | None:
        return next((n for n in self.nodes if n.name == name), None)


@dataclass(frozen=True)
class NodePaths:
    dir: Path
    events: Path
    log: Path
    result: Path
    artifacts: Path
    session: Path
    judgement: Path


@dataclass
class NodeResult:
    """A node's result.json as far as it could be read, with what was wrong with it."""

    result: dict[str, Any] | None
    problems: list[str]


class RunDir:
    def __init__(self, path: Path, plan: Plan | None) -> None:
        self.path = Path(path)
        self.plan = plan  # None: a bare node-side result folder (no controller plan)

    # --- creating and opening -------------------------------------------------------

    @classmethod
    def create(cls, base: Path | None, out: str | None, plan: Plan) -> RunDir:
        """A new run directory, created exclusively: two runs never share one."""
        path = Path(out) if out else Path(base or "runs") / plan.run_id
        if path.exists() and not path.is_dir():
            raise UserError(f"--out {path}: exists and is not a directory")
        if path.is_dir() and any(path.iterdir()):
            raise UserError(f"run directory {path} is not empty; choose another --out")
        try:
            path.mkdir(parents=True, exist_ok=True)
            plan.started = plan.started or now_iso()
            # "x": a second run racing for the same folder fails here, not later
            with (path / RUN_FILE).open("x", encoding="utf-8") as f:
                f.write(json.dumps(plan.to_dict(), indent=2) + "\n")
        except FileExistsError:
            raise UserError(f"run directory {path} was just taken by another run") from None
        except NotADirectoryError:
            raise UserError(f"--out {path}: a parent of it is a file") from None
        except OSError as exc:
            raise UserError(f"--out {path}: cannot create it ({exc.strerror})") from None
        return cls(path, plan)

    @classmethod
    def open(cls, path: Path | str) -> RunDir:
        """An existing run: run.json read strictly (a person's input), or a bare node folder."""
        path = Path(path)
        if not path.is_dir():
            raise UserError(f"run directory not found: {path}")
        plan_path = path / RUN_FILE
        if not plan_path.is_file():
            return cls(path, None)
        try:
            data = json.loads(plan_path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
                raise ValueError("expected an object with a string run_id")
            return cls(path, Plan.from_dict(data))
        except (UnicodeDecodeError, json.JSONDecodeError, ValueError, KeyError,
                TypeError) as exc:
            raise UserError(f"{plan_path}: not a readable run plan ({exc})") from None

    def save_plan(self) -> None:
        assert self.plan is not None
        _write_json_atomic(self.path / RUN_FILE, self.plan.to_dict())

    # --- nodes ---------------------------------------------------------------------

    def node_names(self) -> list[str]:
        """The planned nodes; without a plan, the folders that hold node data."""
        if self.plan is not None and self.plan.nodes:
            return [n.name for n in self.plan.nodes]
        if _holds_node_data(self.path):
            return [self.path.name]
        return sorted(p.name for p in self.path.iterdir()
                      if p.is_dir() and p.name != REPORT_DIRNAME and _holds_node_data(p))

    def is_bare_node_dir(self) -> bool:
        return self.plan is None and _holds_node_data(self.path)

    def paths(self, node: str) -> NodePaths:
        d = self.path if self.is_bare_node_dir() else self.path / node
        return NodePaths(d, d / "events.jsonl", d / "node.log", d / "result.json",
                         d / "artifacts", d / "session.json", d / "judgement.json")

    def prepare_node(self, node: str) -> NodePaths:
        p = self.paths(node)
        p.dir.mkdir(parents=True, exist_ok=True)
        return p

    def set_aside_for_resume(self, node: str) -> list[Path]:
        """Keep what an interrupted run left before the node re-sends it: renamed to the
        next free name, never overwritten. Only for nodes that are actually resumed."""
        p = self.paths(node)
        moved = []
        for src in (p.events, p.result, p.session, p.judgement, p.log):
            if src.exists():
                dest = _free_name(src, "interrupted")
                src.rename(dest)
                moved.append(dest)
        return moved

    def read_result(self, node: str) -> NodeResult:
        """The node's result.json: capped, strict UTF-8, non-finite numbers -> null."""
        path = self.paths(node).result
        if not path.is_file():
            return NodeResult(None, [])
        size = path.stat().st_size
        if size > MAX_RESULT_BYTES:
            return NodeResult(None, [f"result.json is {size} bytes, over the "
                                     f"{MAX_RESULT_BYTES} byte cap"])
        if size == 0:
            return NodeResult(None, ["result.json is empty"])
        problems: list[str] = []
        try:
            data = load_untrusted_json(path.read_bytes(), problems,
                                       result_shape.CAPS.json_values)
        except ValueError as exc:
            return NodeResult(None, [f"result.json is unreadable ({exc})"])
        if not isinstance(data, dict):
            return NodeResult(None, ["result.json is not a JSON object"])
        version = data.get("schema_version")
        if str(version) not in KNOWN_RESULT_SCHEMAS:
            return NodeResult(None, [f"result.json has unknown schema_version {version!r} "
                                     f"(this controller reads {', '.join(KNOWN_RESULT_SCHEMAS)})"])
        return NodeResult(conform_result(data, problems), problems)

    def read_events(self, node: str) -> tuple[list[dict[str, Any]], int]:
        """Events the node streamed, and how many lines could not be used."""
        path = self.paths(node).events
        if not path.is_file():
            return [], 0
        events: list[dict[str, Any]] = []
        bad = 0
        with path.open("rb") as f:
            for raw in f:
                if not raw.strip():
                    continue
                if len(events) >= result_shape.CAPS.events:  # the live stream stops there too
                    bad += 1
                    continue
                try:  # the node may have written this file itself: capped as the stream is
                    ev = load_untrusted_json(raw, [], result_shape.CAPS.event_values)
                except ValueError:
                    bad += 1
                    continue
                if isinstance(ev, dict) and isinstance(ev.get("event"), str):
                    events.append(ev)
                else:
                    bad += 1
        return events, bad

    def write_session(self, node: str, record: dict[str, Any]) -> None:
        _write_json_atomic(self.prepare_node(node).session, record)

    def read_session(self, node: str) -> dict[str, Any]:
        return _read_own_json(self.paths(node).session)

    def write_judgement(self, node: str, judgement: Mapping[str, Any]) -> None:
        _write_json_atomic(self.prepare_node(node).judgement, judgement)

    def read_judgement(self, node: str) -> dict[str, Any] | None:
        return _read_own_json(self.paths(node).judgement) or None

    # out of band: the controller's record of the node's BMC (rackready.steps.oob)
    def write_bmc(self, node: str, record: dict[str, Any]) -> None:
        _write_json_atomic(self.prepare_node(node).dir / "bmc.json", record)

    def read_bmc(self, node: str) -> dict[str, Any] | None:
        return _read_own_json(self.paths(node).dir / "bmc.json") or None

    # the rack-level step (rackready.steps.rack) and the rack's judgement (rackready.decide)
    def write_rack(self, record: Mapping[str, Any]) -> None:
        (self.path / RACK_DIRNAME).mkdir(parents=True, exist_ok=True)
        _write_json_atomic(self.path / RACK_DIRNAME / RACK_FILE, record)

    def read_rack(self) -> dict[str, Any]:
        """The run's rack record ({} when the run had no rack-level step)."""
        return _read_own_json(self.path / RACK_DIRNAME / RACK_FILE)

    def prepare_rack_group(self, group: str) -> Path:
        folder = self.path / RACK_DIRNAME / _rack_name(group)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def write_rack_output(self, group: str, node: str, suffix: str, text: str) -> None:
        """What one node's rack workload printed (.log) or measured (.jsonl), as sent."""
        path = self.prepare_rack_group(group) / f"{_rack_name(node)}{suffix}"
        path.write_text(text, encoding="utf-8")

    def write_rack_judgement(self, judgement: Mapping[str, Any]) -> None:
        (self.path / RACK_DIRNAME).mkdir(parents=True, exist_ok=True)
        _write_json_atomic(self.path / RACK_DIRNAME / RACK_JUDGEMENT_FILE, judgement)

    # `--via slurm`: the job of each node and what Slurm was told (rackready.steps.slurm_run)
    def write_slurm(self, record: Mapping[str, Any]) -> None:
        (self.path / RACK_DIRNAME).mkdir(parents=True, exist_ok=True)
        _write_json_atomic(self.path / RACK_DIRNAME / "slurm.json", record)

    def read_slurm(self) -> dict[str, Any]:
        return _read_own_json(self.path / RACK_DIRNAME / "slurm.json")

    def read_rack_judgement(self) -> dict[str, Any] | None:
        return _read_own_json(self.path / RACK_DIRNAME / RACK_JUDGEMENT_FILE) or None

    @property
    def report_dir(self) -> Path:
        return self.path / REPORT_DIRNAME


def load_untrusted_json(raw: bytes, problems: list[str], max_values: int | None = None) -> Any:
    """json.loads for bytes from a node: strict UTF-8; NaN/Infinity become null, lone
    surrogates visible escapes, control characters and bidi overrides are removed, each
    kind named in `problems` (JSON has no such numbers, Python writes them anyway; a
    surrogate is valid JSON but no text a report can hold).

    max_values bounds what parsing may build: a file of tiny values ("[{},{},...]") costs
    far more memory than its bytes. Commas and brackets bound the number of values from
    above (text can only add to them), so the bytes are counted before parsing."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason})") from None
    if max_values is not None:
        found = raw.count(b",") + raw.count(b"{") + raw.count(b"[")
        if found > max_values:
            raise ValueError(f"more than {max_values} JSON values (the cap per file)")
    cleaner = _Cleaner()

    def non_finite(name: str) -> None:
        cleaner.note(f"non-finite number {name} replaced by null")

    try:
        data = json.loads(text, parse_constant=non_finite)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    data = cleaner.clean(data)
    problems.extend(cleaner.lines())
    return data


# Integers a report can carry exactly (RFC 8785 / I-JSON: IEEE doubles).
MAX_SAFE_INT = 2**53 - 1
_MAX_NAMED = 5  # replacements named one by one; the rest are counted


class _Cleaner:
    """Walks parsed node JSON once: large exponents parse to inf as floats (treated like
    the NaN/Infinity words), integers no report can carry exactly become null, lone
    surrogates in text and keys become escapes. Every replacement is counted, the first
    few named: a file of a million NaNs is not a million problem lines."""

    def __init__(self) -> None:
        self.named: list[str] = []
        self.count = 0
        self.surrogates = 0
        self.controls = 0

    def note(self, line: str) -> None:
        self.count += 1
        if len(self.named) < _MAX_NAMED:
            self.named.append(line)

    def lines(self) -> list[str]:
        out = list(self.named)
        if self.count > len(self.named):
            out.append(f"{self.count - len(self.named)} more number(s) replaced by null")
        if self.surrogates:
            out.append(f"{self.surrogates} text value(s) held lone surrogates (no Unicode "
                       "text); written as their \\u escapes")
        if self.controls:
            out.append(f"{self.controls} text value(s) held control characters or bidi "
                       "overrides; removed")
        return out

    def text(self, v: str) -> str:
        """Text a report can hold and a reader reads as it is: no lone surrogates, no
        terminal controls (C0 but \\n and \\t, C1), no bidi overrides."""
        if v.isascii() and v.isprintable():  # most of a result: nothing to look for
            return v
        if has_surrogates(v):
            self.surrogates += 1
            v = replace_surrogates(v)
        if has_control(v):
            self.controls += 1
            v = strip_control(v)
        return v

    def clean(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, float) and not math.isfinite(v):
            self.note(f"non-finite number {v} replaced by null")
            return None
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_SAFE_INT:
            self.note(f"integer of {len(str(abs(v)))} digits replaced by null")
            return None
        if isinstance(v, dict):
            return {self.text(k): self.clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [self.clean(x) for x in v]
        return v


def _holds_node_data(p: Path) -> bool:
    return (p / "result.json").is_file() or (p / "events.jsonl").is_file()


def _free_name(path: Path, tag: str) -> Path:
    stem, suffix = path.name.split(".", 1) if "." in path.name else (path.name, "")
    for i in range(1, 10_000):
        cand = path.with_name(f"{stem}.{tag}-{i}{'.' + suffix if suffix else ''}")
        if not cand.exists():
            return cand
    raise UserError(f"{path.parent}: too many interrupted copies of {path.name}")


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _read_own_json(path: Path) -> dict[str, Any]:
    """A file the controller wrote itself; a torn one reads as absent. Node text in it
    is cleaned again: a run written before node data was cleaned on reading may hold
    lone surrogates, and its reports must still be written."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return {}
    return _Cleaner().clean(data) if isinstance(data, dict) else {}
