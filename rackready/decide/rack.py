"""The rack-level step's judgement (pure): what the nodes of each fabric measured
together (rackready.steps.rack runs validation.workloads.rack_nccl: an all_reduce
across all of them, then every pair rail by rail), judged by the controller.

Fabric: the site's `rack.fabric` (rackready_validation_site) where given, else the
node's fabric kind (ib, roce): nodes in one group are cabled to the same switches.
A node that was unreachable or whose suite did not complete is left out with its
reason; a group that misses a planned node is never PASS.

Judgement (here, from the measurements, against each end's profile; a link is
held to the looser of its two ends' floors, as the slower end bounds it):

    rack.pair_busbw            >= floor per rail (GB/s)
    rack.pair_busbw_vs_median  >= ratio of the fabric's median rail
    rack.allreduce_busbw       >= floor, rack.allreduce_correct == true

Each comparison is validation.judge.limit_outcome's: a provisional floor missed short of
its gross-fault line reads below_expected (a strict site fails it), past it FAIL.
A failing pair's two nodes each get a FAIL verdict (scope "rack") naming the link:
both nodes, the rail, both NICs, and the side whose port refused where known. The
record goes to <run>/_rack/rack.json; rackready.decide.judge carries the verdicts into
the nodes' judgements, and decide.outcome words each group's outcome and the rack's.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rackready.decide.outcome import group_outcome, link_component
from rackready.decide.records import (
    AllreduceRecord,
    Judgement,
    LeftOut,
    Miss,
    PairRow,
    RackGroup,
    RackStep,
    Suspect,
    VerdictRecord,
)
from rackready.sanitize import one_line
from validation.judge import limit_outcome
from validation.model import Outcome, Threshold

# The step's two checks: the all_reduce (judged per fabric) and the pairwise links
# (judged per link, a FAIL verdict on both ends).
RACK_CHECKS = ("rack.allreduce", "rack.pairwise")

PAIR_METRIC, RATIO_METRIC = "rack.pair_busbw", "rack.pair_busbw_vs_median"

AR_METRIC, AR_OK_METRIC = "rack.allreduce_busbw", "rack.allreduce_correct"

SENDER = "from"  # the node whose workload sent a record (set by the controller)

# Both ends of a link report it; their values must agree within this fraction of the
# larger one (honest ends share the slower end's time, so they agree exactly).
AGREE_TOLERANCE = 0.10


@dataclass(frozen=True)
class Floors:
    """One node's rack-level limits, from its controller-side profile."""

    pair: dict[str, Any] | None
    ratio: dict[str, Any] | None
    allreduce: dict[str, Any] | None
    allreduce_ok: dict[str, Any] | None
    strict: bool = False  # the site's provisional_limits: strict

    @classmethod
    def of(cls, profile) -> Floors:
        def first(metric: str) -> dict[str, Any] | None:
            ts = [t for t in profile.thresholds_for(metric) if not t.labels]
            return ts[0].to_dict() if ts else None

        return cls(first(PAIR_METRIC), first(RATIO_METRIC), first(AR_METRIC),
                   first(AR_OK_METRIC), bool(getattr(profile, "provisional_strict", False)))


def fabric_key(site: dict[str, Any], fabric: str) -> str:
    rack = given if isinstance(given := site.get("rack"), dict) else {}
    return str(rack.get("fabric") or fabric or "default")


def eligibility(session: dict[str, Any], judgement: Judgement | None) -> str:
    """'' when the node can take part; else why it is left out."""
    problem = str(session.get("problem") or "")
    if problem.startswith("unreachable"):
        return problem
    if not judgement:
        return "not judged"
    if judgement.get("outcome") == "INCOMPLETE":
        return one_line(f"node suite incomplete: {judgement.get('outcome_reason') or problem}",
                        160)
    return ""


def groups(plan, judgements: Mapping[str, Judgement], sessions: dict[str, dict[str, Any]]
           ) -> dict[str, dict[str, Any]]:
    """fabric -> {"planned": [...], "members": [...], "left_out": [{node, reason}]}."""
    out: dict[str, dict[str, Any]] = {}
    for p in plan.nodes:
        key = fabric_key(dict(p.site), str(p.site.get("fabric") or ""))
        g = out.setdefault(key, {"planned": [], "members": [], "left_out": []})
        g["planned"].append(p.name)
        why = eligibility(sessions.get(p.name, {}), judgements.get(p.name))
        if why:
            g["left_out"].append({"node": p.name, "reason": why})
        else:
            g["members"].append(p.name)
    return out


def _looser(ts: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The looser of the ends' floors ('>=' limits): the slower end bounds a link."""
    have = [t for t in ts if t]
    return min(have, key=lambda t: float(t["value"])) if have else None


def _outcome(value: Any, t: dict[str, Any] | None, strict: bool) -> str:
    """pass, below_expected or fail, as the node judge decides (validation.judge)."""
    if t is None:
        return "fail"  # a judged metric without a limit never passes
    return limit_outcome(Threshold.from_dict(t), value, strict)


def _limit(t: dict[str, Any] | None) -> str:
    return f"{t['op']} {t['value']} {t.get('unit', '')}".strip() if t else "no limit"


def link_words(rec: dict[str, Any]) -> str:
    lb = rec["labels"]
    return (f"{lb['node_a']} {lb['nic_a']} <-> {lb['node_b']} {lb['nic_b']} "
            f"(rail {lb['rail']})")


def judge_group(name: str, planned: list[str], members: list[str],
                left_out: list[LeftOut], records: list[dict[str, Any]],
                floors: dict[str, Floors], problems: list[str],
                expected_rails: dict[str, int]) -> RackGroup:
    """One fabric's rack-level judgement from the workload's measurements."""
    problems = list(problems)
    pairs = agreed_links(records, members, problems)
    # the all_reduce's numbers come from rank 0, the first member (the rendezvous host)
    lead = members[0] if members else None
    ar = next((r for r in records if r.get("name") == AR_METRIC and r.get(SENDER) == lead),
              None)
    ar_ok = next((r for r in records
                  if r.get("name") == AR_OK_METRIC and r.get(SENDER) == lead), None)
    rows: list[PairRow] = []
    carried = [r for r in pairs if not r["labels"].get("refused")]
    median = statistics.median(float(r["value"]) for r in carried) if carried else None
    got = {(r["labels"]["node_a"], r["labels"]["node_b"], str(r["labels"]["rail"]))
           for r in pairs}
    for i, a in enumerate(members):
        for b in members[i + 1:]:
            for rail in range(min(expected_rails.get(a, 0), expected_rails.get(b, 0))):
                if (a, b, str(rail)) not in got and (b, a, str(rail)) not in got:
                    problems.append(f"no measurement for {a} <-> {b} rail {rail}")
    for r in pairs:
        lb = r["labels"]
        ends = [floors.get(lb["node_a"]), floors.get(lb["node_b"])]
        strict = any(f.strict for f in ends if f)
        floor = _looser([f.pair if f else None for f in ends])
        rfloor = _looser([f.ratio if f else None for f in ends])
        value = float(r["value"])
        ratio = round(value / median, 4) if median else None
        refused = lb.get("refused", "")
        missed: list[tuple[str, str, Any, str, Any, str]] = []  # outcome, metric, value, ...
        if refused:
            missed.append(("fail", PAIR_METRIC, value, "GB/s", floor,
                           f"link {link_words(r)} refused: {refused}"))
        else:
            got_pair = _outcome(value, floor, strict)
            if got_pair != "pass":
                missed.append((got_pair, PAIR_METRIC, value, "GB/s", floor,
                               f"link {link_words(r)}: {value} GB/s, limit {_limit(floor)}"))
            got_ratio = _outcome(ratio, rfloor, strict) if ratio is not None else "pass"
            if got_ratio != "pass":
                assert median is not None  # a ratio is taken only against a median
                missed.append((got_ratio, RATIO_METRIC, ratio, "", rfloor,
                               f"link {link_words(r)}: {value} GB/s is {ratio} x the fabric's "
                               f"median rail ({round(median, 4)} GB/s), limit {_limit(rfloor)}"))
        fails = [m for m in missed if m[0] == "fail"]
        below = [m for m in missed if m[0] == "below_expected"]
        rows.append({"node_a": lb["node_a"], "node_b": lb["node_b"], "rail": int(lb["rail"]),
                     "nic_a": lb["nic_a"], "nic_b": lb["nic_b"], "value": value,
                     "unit": "GB/s", "vs_median": ratio, "refused": refused,
                     "simulated": lb.get("simulated", ""), "threshold": floor,
                     "outcome": "fail" if fails else "below_expected" if below else "pass",
                     "failures": [_miss(m) for m in fails],
                     "below_expected": [_miss(m) for m in below]})
    allreduce: AllreduceRecord | None = None
    if ar is not None:
        ar_floor = _looser([floors[n].allreduce for n in members if n in floors])
        ok_limit = next((floors[n].allreduce_ok for n in members
                         if n in floors and floors[n].allreduce_ok), None)
        strict = any(floors[n].strict for n in members if n in floors)
        ok = ar_ok["value"] if ar_ok else None
        ar_got = [_outcome(ar["value"], ar_floor, strict), _outcome(ok, ok_limit, strict)]
        ar_outcome = ("fail" if "fail" in ar_got else "below_expected" if "below_expected" in
                      ar_got else "pass")
        allreduce = {"check": RACK_CHECKS[0], "value": ar["value"], "unit": "GB/s",
                     "correct": ok,
                     "labels": ar["labels"], "threshold": ar_floor,
                     "outcome": ar_outcome,
                     "message": "" if ar_outcome == "pass" else (
                         f"all_reduce across {len(members)} nodes: {ar['value']} GB/s "
                         f"(limit {_limit(ar_floor)}), correct {ok}")}
    elif len(members) >= 2:
        problems.append("the all_reduce reported no measurement")
    return {"fabric": name, "planned": planned, "members": members, "left_out": left_out,
            **group_outcome(name, planned, members, left_out, rows, allreduce, problems),
            "median_rail_gbps": median, "allreduce": allreduce, "pairs": rows,
            "suspects": suspects(rows), "problems": problems}


def _miss(m: tuple[str, str, Any, str, Any, str]) -> Miss:
    _, metric, value, unit, threshold, message = m
    return {"metric": metric, "value": value, "unit": unit, "threshold": threshold,
            "message": message}


def _link(rec: dict[str, Any]) -> tuple[str, str, str]:
    lb = rec["labels"]
    a, b = sorted((str(lb["node_a"]), str(lb["node_b"])))
    return a, b, str(lb["rail"])


def _agree(x: dict[str, Any], y: dict[str, Any]) -> bool:
    """Both ends say the same: both refused, or both carried within AGREE_TOLERANCE."""
    rx, ry = bool(x["labels"].get("refused")), bool(y["labels"].get("refused"))
    if rx or ry:
        return rx and ry
    vx, vy = float(x["value"]), float(y["value"])
    return abs(vx - vy) <= AGREE_TOLERANCE * max(abs(vx), abs(vy))


def agreed_links(records: list[dict[str, Any]], members: list[str],
                 problems: list[str]) -> list[dict[str, Any]]:
    """The pair records that can be judged: for each link, the reports of its two ends
    (a record from any other node is dropped and counted), both present and agreeing.
    A link one end reports alone, or the ends disagree on, is named in `problems` (the
    fabric is then INCOMPLETE) and judged for neither end: one node's word never fails
    its peer. An agreed link carries the lower of the two values."""
    pairs = [r for r in records if r.get("name") == PAIR_METRIC]
    by_link: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    foreign = 0
    for r in pairs:
        a, b, rail = _link(r)
        sender = r.get(SENDER)
        if a not in members or b not in members or sender not in (a, b) or a == b:
            foreign += 1
            continue
        by_link.setdefault((a, b, rail), {}).setdefault(sender, r)
    if foreign:
        problems.append(f"{foreign} link record(s) dropped: sent by a node that is not an "
                        "end of the link, or about a node that did not take part")
    out = []
    for (a, b, rail), ends in sorted(by_link.items()):
        if len(ends) < 2:
            (alone,) = ends
            other = b if alone == a else a
            problems.append(f"{a} <-> {b} rail {rail}: only {alone} reported it; "
                            f"{other} sent nothing for the link")
        elif not _agree(ends[a], ends[b]):
            problems.append(f"{a} <-> {b} rail {rail}: the ends disagree ({a}: "
                            f"{_said(ends[a])}, {b}: {_said(ends[b])}; tolerance "
                            f"{AGREE_TOLERANCE:.0%})")
        else:
            out.append(min(ends.values(), key=lambda r: float(r["value"])))
    return out


def _said(rec: dict[str, Any]) -> str:
    refused = rec["labels"].get("refused")
    return f"refused ({one_line(str(refused), 60)})" if refused else f"{rec['value']} GB/s"


def suspects(rows: list[PairRow]) -> list[Suspect]:
    """Per rail: the node in every failing pair of that rail (two or more pairs), or
    the end whose port refused. With two nodes only a refusal can say which end."""
    out: list[Suspect] = []
    by_rail: dict[int, list[PairRow]] = {}
    for r in rows:
        if r["outcome"] == "fail":
            by_rail.setdefault(r["rail"], []).append(r)
    for rail, bad in sorted(by_rail.items()):
        common = set.intersection(*({r["node_a"], r["node_b"]} for r in bad))
        for node in sorted(common) if len(bad) >= 2 else []:
            nic = next(r["nic_a"] if r["node_a"] == node else r["nic_b"] for r in bad)
            out.append({"node": node, "rail": rail, "nic": nic,
                        "why": f"in all {len(bad)} failing pairs of rail {rail}"})
        for r in bad:
            for node, nic in ((r["node_a"], r["nic_a"]), (r["node_b"], r["nic_b"])):
                if f"{node} {nic} port" in r["refused"] and not any(
                        s["node"] == node and s["rail"] == rail for s in out):
                    out.append({"node": node, "rail": rail, "nic": nic,
                                "why": "its port refused the rail"})
    return out


def node_verdicts(rack: RackStep) -> dict[str, list[VerdictRecord]]:
    """node -> verdicts (scope rack, fail or below_expected) naming each link that missed
    a limit, on both of its ends."""
    out: dict[str, list[VerdictRecord]] = {}
    for g in rack.get("groups", []):
        sus = {(s["node"], s["rail"]) for s in g.get("suspects", [])}
        for r in g.get("pairs", []):
            missed: list[tuple[Outcome, Miss]] = [("fail", f) for f in r["failures"]] + \
                [("below_expected", f) for f in r.get("below_expected", [])]
            for outcome, f in missed:
                for me, peer, nic, other in ((r["node_a"], r["node_b"], r["nic_a"], r["nic_b"]),
                                             (r["node_b"], r["node_a"], r["nic_b"], r["nic_a"])):
                    where = (f"this node's {nic} is the suspect end"
                             if (me, r["rail"]) in sus
                             else f"the suspect end is {peer} {other}"
                             if (peer, r["rail"]) in sus
                             else f"check both ends: {me} {nic} and {peer} {other}")
                    out.setdefault(me, []).append({
                        "check": RACK_CHECKS[1], "metric": f["metric"], "outcome": outcome,
                        "value": f["value"], "unit": f["unit"],
                        "labels": {"peer": peer, "rail": str(r["rail"]), "nic": nic,
                                   "peer_nic": other},
                        "threshold": f["threshold"], "spread": None, "scope": "rack",
                        "component": link_component(me, nic, peer, other, r["rail"]),
                        "message": f["message"] + (" [SIMULATED rail: gloo over the lab "
                                                   "network]" if r.get("simulated") else ""),
                        "remediation": f"{where}: port state, cable and transceiver on rail "
                                       f"{r['rail']}, then the switch port; re-run the rack "
                                       "step (invoke validate --inventory)",
                    })
    return out
