"""What the controller knows about a node's result beyond its measurements: whether the
session ended normally, the cited evidence arrived intact, the result belongs to this
run and this machine, its GPUs are the ones the BMC lists, and the result agrees with what
the node streamed live.

Each problem is a finding, {"kind", "outcome", "problem"}: kind one of KINDS, outcome
INCOMPLETE (the result cannot be believed) or FAIL (the node's own evidence shows a
fault), problem one line naming the parts. rackready.decide.node records them in the
judgement's "integrity" list and decide.outcome.decide_node decides from it; a node
with a finding is never PASS.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from rackready.decide.identifiers import id_key, shown
from rackready.remote.result_shape import conform_result
from rackready.run.rundir import PlannedIdentity, sha256_file
from rackready.sanitize import one_line

KINDS = ("session", "evidence", "replay", "identity", "stream")
FAILED_STATUSES = ("error", "timeout")
_SHOWN = 3  # parts named in one line; the rest are counted


def finding(kind: str, problem: str, outcome: str = "INCOMPLETE") -> dict[str, str]:
    assert kind in KINDS and outcome in ("INCOMPLETE", "FAIL")
    return {"kind": kind, "outcome": outcome, "problem": one_line(problem, 300)}


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


# --- the session ------------------------------------------------------------------------

def session_findings(problem: str, session: dict[str, Any]) -> list[dict[str, str]]:
    """A session that did not end normally (a cap, a deadline, a stall, a failed fetch)
    or a file the controller refused: what was fetched is not the node's whole word."""
    out = [finding("session", problem)] if problem else []
    refused = session.get("refused")
    if isinstance(refused, list) and refused:
        out.append(finding("session", f"{len(refused)} file(s) refused while fetching: "
                                      f"{_names([str(r) for r in refused])}"))
    return out


# --- cited evidence ---------------------------------------------------------------------

def cited_evidence(result: dict[str, Any]) -> dict[str, str | None]:
    """What the result cites: its artifacts map (path -> sha256), and every artifact a
    measurement names (no hash: it must at least be there), so a result that drops its
    map still answers for the evidence its measurements point at."""
    cited: dict[str, str | None] = {}
    for c in _checks(result):
        for m in c.get("measurements") or []:
            if isinstance(m, dict) and isinstance(m.get("artifact"), str) and m["artifact"]:
                cited.setdefault(m["artifact"], None)
    recorded = result.get("artifacts")
    if isinstance(recorded, dict):
        cited.update({str(k): str(v) for k, v in recorded.items()})
    return cited


def evidence_findings(node_dir: Path, cited: dict[str, str | None]) -> list[dict[str, str]]:
    """Every artifact result.json cites (path -> sha256) must be on the controller with
    that hash: evidence that is missing or different backs nothing."""
    root = (node_dir / "artifacts").resolve()
    missing: list[str] = []
    different: list[str] = []
    for rel, want in sorted(cited.items()):
        # the runner records paths relative to its out dir ("artifacts/x"); accept "x" too
        path = (root / str(rel).removeprefix("artifacts/")).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            missing.append(str(rel))
        elif want is not None and sha256_file(path) != want:
            different.append(str(rel))
    out = []
    if missing:
        out.append(finding("evidence", f"{len(missing)} of {len(cited)} cited artifact(s) "
                                       f"missing on the controller: {_names(missing)}"))
    if different:
        out.append(finding("evidence", f"{len(different)} cited artifact(s) differ from the "
                                       f"sha256 result.json records: {_names(different)}"))
    return out


# --- this run, this bundle ----------------------------------------------------------------

def replay_findings(result: dict[str, Any], nonce: str | None,
                    bundle_sha256: str | None) -> list[dict[str, str]]:
    """The result must echo this run's nonce and name the bundle the controller shipped:
    a result kept from another run (or another suite) is not this run's."""
    out = []
    if nonce and result.get("nonce") != nonce:
        out.append(finding("replay", "result.json does not carry this run's nonce "
                           + ("(it carries none)" if not result.get("nonce")
                              else "(it carries another run's)")
                           + ": not a result of this run"))
    if bundle_sha256 and result.get("bundle_sha256") != bundle_sha256:
        out.append(finding("replay", "the node ran a different validation bundle than the one "
                           "shipped" if result.get("bundle_sha256")
                           else "result.json names no bundle_sha256: the node ran a different "
                                "validation bundle than the one shipped, or none"))
    return out


# --- which machine, which GPUs ------------------------------------------------------------

def _checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The conformed result's checks (a result whose checks are no list has none)."""
    checks = result.get("checks")
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []


def gpu_ids(result: dict[str, Any]) -> dict[str, dict[str, str]]:
    """GPU index -> {"serial", "uuid"} from the judged measurements (gpu.serial, gpu.uuid)."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for c in _checks(result):
        for m in c.get("measurements") or []:
            kind = {"gpu.serial": "serial", "gpu.uuid": "uuid"}.get(m.get("name"))
            gpu = (m.get("labels") or {}).get("gpu")
            if kind and gpu is not None and m.get("value") not in (None, ""):
                out[str(gpu)][kind] = str(m["value"]).strip()
    return dict(out)


def _short(host: str) -> str:
    return host.strip().lower().split(".", 1)[0]


def identity_findings(identity: PlannedIdentity, result: dict[str, Any]
                      ) -> list[dict[str, str]]:
    """The result's hostname is the node's; no GPU serial or UUID twice on one node; the
    serials are the inventory's where it lists them (rackready_gpu_serials)."""
    out = []
    want_hosts = [str(h) for h in identity.get("hostnames") or [] if h]
    got = result.get("hostname")
    if want_hosts and not (isinstance(got, str) and _short(got) in map(_short, want_hosts)):
        out.append(finding("identity", f"result.json is from host {got!r}, not this node "
                                       f"({', '.join(want_hosts)})"))
    ids = gpu_ids(result)
    for kind in ("serial", "uuid"):  # compared as id_key reads them: spelling evades nothing
        seen: dict[str, list[str]] = defaultdict(list)
        for gpu, entry in sorted(ids.items()):
            if id_key(entry.get(kind) or ""):
                seen[id_key(entry[kind])].append(gpu)
        for gpus in (g for _, g in sorted(seen.items()) if len(g) > 1):
            out.append(finding("identity", f"GPU {kind} {_spellings(ids, gpus, kind)} "
                                           f"reported for GPUs {', '.join(gpus)} of this node"))
    expected = {id_key(s): str(s) for s in identity.get("gpu_serials") or [] if id_key(s)}
    if expected and ids:
        serials = {id_key(e["serial"]): (gpu, e["serial"]) for gpu, e in ids.items()
                   if id_key(e.get("serial") or "")}
        extra = [f"GPU {g} serial {shown(s)}" for k, (g, s) in
                 sorted(serials.items(), key=lambda x: x[1]) if k not in expected]
        absent = [shown(s) for k, s in expected.items() if k not in serials]
        if extra or absent:
            words = "; ".join(p for p in (
                f"not in the inventory: {_names(extra)}" if extra else "",
                f"expected but not found: {_names(absent)}" if absent else "") if p)
            out.append(finding("identity", f"GPU serials differ from rackready_gpu_serials: "
                                           f"{words}", "FAIL"))
    return out


def bmc_serial_findings(bmc: dict[str, Any] | None, result: dict[str, Any] | None
                        ) -> tuple[list[dict[str, str]], str]:
    """The GPU serials the BMC lists (bmc.json identity "gpus", rackready.steps.oob) against
    those the node measured (gpu.serial). A serial the BMC lists that the node did not
    report, or one the node reports that a BMC listing as many GPUs does not, is a FAIL
    finding naming both sides' unmatched serials: the GPUs the node tested are not the
    ones in the machine, or one side lies. Returns (findings, note): the note says what
    was not cross-checked ("" when all was): a BMC that lists no GPU serial, a node that
    reported none, a BMC that lists fewer GPUs than the node (it is compared on those)."""
    ident = (bmc or {}).get("identity")
    if result is None or not isinstance(ident, dict) or not ident:
        return [], ""  # no result, or the BMC was not read: the bmc check says so
    listed = [g for g in ident.get("gpus") or [] if isinstance(g, dict)]
    theirs = {id_key(g["serial"]): f"{g['serial']} (at {g.get('slot') or '?'})"
              for g in listed if id_key(g.get("serial") or "")}
    ours = {id_key(e["serial"]): f"{e['serial']} (GPU {gpu})"
            for gpu, e in sorted(gpu_ids(result).items(), key=lambda x: _index(x[0]))
            if id_key(e.get("serial") or "")}
    if not theirs:
        return [], (f"BMC reports no GPU serials: the node's {len(ours)} GPU serial(s) are "
                    "not cross-checked out of band" if ours else "")
    if not ours:
        return [], (f"GPU serials not cross-checked with the BMC's {len(theirs)}: the node "
                    "reported none")
    complete = len(theirs) >= len(ours)
    bmc_only = [w for k, w in theirs.items() if k not in ours]
    node_only = [w for k, w in ours.items() if k not in theirs]
    note = ("" if complete else f"BMC reports serials for {len(theirs)} of the node's "
            f"{len(ours)} GPUs: only those are cross-checked out of band")
    if not bmc_only and not (complete and node_only):
        return [], note
    words = "; ".join(p for p in (
        f"the BMC lists serial {_names(bmc_only)}, not reported by the node" if bmc_only
        else "",
        f"the node reports serial {_names(node_only)}, not listed by the BMC" if node_only
        else "")
        if p)
    return [finding("identity", f"GPU serials differ between the node and its BMC: {words}",
                    "FAIL")], note


def _index(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def _spellings(ids: dict[str, dict[str, str]], gpus: list[str], kind: str) -> str:
    """One identifier as the GPUs that share it spell it: "A" or "A (also spelled B)"."""
    spelled = list(dict.fromkeys(shown(ids[g][kind]) for g in gpus))
    return spelled[0] + (f" (also spelled {', '.join(spelled[1:])})" if spelled[1:] else "")


def rack_identity_findings(ids_by_node: dict[str, dict[str, dict[str, str]]]
                           ) -> dict[str, list[dict[str, str]]]:
    """One GPU serial or UUID on two nodes, however each spells it (id_key: case, NFKC,
    invisible characters, a digits-only serial's leading zeros): neither node's result can
    be believed. Each node's finding names its own spelling and the others'."""
    owners: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for node, ids in ids_by_node.items():
        for entry in ids.values():
            for kind in ("serial", "uuid"):
                if id_key(entry.get(kind) or ""):
                    owners[(kind, id_key(entry[kind]))].setdefault(node, entry[kind])
    out: dict[str, list[dict[str, str]]] = defaultdict(list)
    for (kind, _), spelled in sorted(owners.items()):
        if len(spelled) > 1:
            for node in sorted(spelled):
                others = ", ".join(o + ("" if spelled[o] == spelled[node]
                                        else f" (as {shown(spelled[o])})")
                                   for o in sorted(spelled) if o != node)
                out[node].append(finding("identity", f"GPU {kind} {shown(spelled[node])} is "
                                                     f"also reported by {others}"))
    return dict(out)


# --- the live stream against result.json ------------------------------------------------

def _values(check: dict[str, Any]) -> list[str]:
    return sorted(json.dumps([m.get("name"), m.get("labels"), m.get("value")], sort_keys=True)
                  for m in check.get("measurements") or [])


def _conformed(name: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """One streamed check result in the controller's shape, under the name it was
    streamed with (the event's "check"; the result's own when the event names none)."""
    checks = conform_result({"checks": [{**result, "check": name}]}, [])["checks"]
    return checks[0] if checks else None


def _last_words(events: list[dict[str, Any]]
                ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[Any]],
                           list[dict[str, str]]]:
    """What the stream said of each check, in order: its finished results, the
    measurements it streamed since it last started (a check taken over by a resumed run
    is re-emitted without them), and findings for an event that names two checks."""
    words: dict[str, list[dict[str, Any]]] = defaultdict(list)
    measured: dict[str, list[Any]] = {}
    out = []
    for ev in events:
        kind, check = ev.get("event"), ev.get("check")
        check = check if isinstance(check, str) and check else None
        if kind == "check_started" and check and not ev.get("resumed"):
            measured[check] = []
        elif kind == "measurement" and check:
            measured.setdefault(check, []).append(ev.get("measurement"))
        elif kind == "check_finished" and isinstance(ev.get("result"), dict):
            named = ev["result"].get("check")
            named = named if isinstance(named, str) and named else None
            if check and named and named != check:
                out.append(finding("stream", f"the live stream finished check {check} with "
                                             f"the result of check {named}"))
            name = check or named
            live = _conformed(name, ev["result"]) if name else None
            if live is not None:
                words[live["check"]].append(live)
    return words, measured, out


def _measured_differ(ms: list[Any], final: dict[str, Any], status: str) -> bool:
    """The measurements streamed live against result.json's for the check: the same ones
    (a check that timed out may have streamed more than it kept, never other ones)."""
    live = _conformed("m", {"status": "ok", "measurements": ms}) or {}
    streamed, kept = Counter(_values(live)), Counter(_values(final))
    return not kept <= streamed if status == "timeout" else kept != streamed


def stream_findings(events: list[dict[str, Any]], result: dict[str, Any]
                    ) -> list[dict[str, str]]:
    """What the node streamed while it ran must be what result.json says afterwards: the
    stream's last word on each check (its status and measurements) and the measurements
    it streamed one by one. A check the stream reported failing (an error, a timeout)
    that result.json, or a later word of the stream, calls ok is a FAIL: the node's live
    word stands; any other disagreement is INCOMPLETE."""
    words, measured, out = _last_words(events)
    reported = {c["check"]: c for c in _checks(result)}
    for name, said in sorted(words.items()):
        live, final = said[-1], reported.get(name)
        if final is None:
            out.append(finding("stream", f"check {name} finished {live['status']} in the live "
                                         "stream and is absent from result.json"))
        elif live["status"] in FAILED_STATUSES and final["status"] == "ok":
            out.append(finding("stream", f"check {name}: {live['status']} in the live stream "
                                         f"({one_line(live.get('message') or '', 80)}), ok in "
                                         "result.json", "FAIL"))
        elif live["status"] != final["status"] or _values(live) != _values(final):
            out.append(finding("stream", f"check {name}: result.json differs from the live "
                                         f"stream ({live['status']} streamed, "
                                         f"{final['status']} in result.json)"))
        # a word taken back: a last word that fails is judged above or by its own status
        statuses = [w["status"] for w in said]
        if (live["status"] not in FAILED_STATUSES
                and len({(w["status"], tuple(_values(w))) for w in said}) > 1):
            failed = any(s in FAILED_STATUSES for s in statuses)
            out.append(finding("stream", f"check {name} finished {', then '.join(statuses)} "
                               "in the live stream"
                               + ("" if len(set(statuses)) > 1 else
                                  " with different measurements"),
                               "FAIL" if failed else "INCOMPLETE"))
    for name, ms in sorted(measured.items()):
        final = reported.get(name)
        status = words[name][-1]["status"] if words.get(name) else ""
        if final is None:
            if ms and name not in words:
                out.append(finding("stream", f"check {name}: {len(ms)} measurement(s) "
                                             "streamed live, absent from result.json"))
        elif _measured_differ(ms, final, status or final["status"]):
            out.append(finding("stream", f"check {name}: measurements streamed live differ "
                                         f"from result.json ({len(ms)} streamed, "
                                         f"{len(final.get('measurements') or [])} in "
                                         "result.json)"))
    return out


def node_findings(node_dir: Path, identity: PlannedIdentity, result: dict[str, Any] | None,
                  events: list[dict[str, Any]], session: dict[str, Any], nonce: str | None,
                  bundle_sha256: str | None) -> list[dict[str, str]]:
    """Every finding for one node but its session problem (judging adds that one) and the
    BMC's GPU serials (bmc_serial_findings: judging adds those, with its note)."""
    out = session_findings("", session)
    if result is None:
        return out  # no result: INCOMPLETE already, nothing to compare it with
    out += replay_findings(result, nonce, bundle_sha256)
    out += identity_findings(identity, result)
    out += evidence_findings(node_dir, cited_evidence(result))
    if events:
        out += stream_findings(events, result)
    return out
