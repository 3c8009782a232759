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

The reference cannot be moved by the figures under judgement (a colluding majority):
  - a link's figure is plausible only up to its line rate: the lower of its two ends'
    NIC rates in their controller-side profiles (inventory.nic.rate_gbps), Gb/s / 8 =
    GB/s each way (a two-rank pair's bus bandwidth is the bytes each way per second:
    400 Gb/s = 50 GB/s). Above it, the two ends that agreed on it get a FAIL verdict
    saying so; the figure is never a measurement and never enters the median;
  - the fabric median comes from plausible figures only, and each end of a link under
    its ratio is held to the lower of the median and its own fastest other link: an
    end whose own links are all that slow is named below_expected (never failed, not
    even on a strict site), so the others' figures alone cannot fail a node, while a
    colluder's own fast links hold it to the median. A rail slow on one node (its
    other rails fast) still fails, with that node the suspect.
A failing pair's two nodes each get a FAIL verdict (scope "rack") naming the link:
both nodes, the rail, both NICs, and the side whose port refused where known. The
record goes to <run>/_rack/rack.json; rackready.decide.judge carries the verdicts into
the nodes' judgements, and decide.outcome words each group's outcome and the rack's.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

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
    ThresholdRecord,
    VerdictRecord,
    threshold_record,
)
from rackready.run.rundir import Plan
from rackready.sanitize import one_line
from validation.judge import limit_outcome
from validation.model import Outcome, Threshold
from validation.profile import Profile

# The step's two checks: the all_reduce (judged per fabric) and the pairwise links
# (judged per link, a FAIL verdict on both ends).
RACK_CHECKS = ("rack.allreduce", "rack.pairwise")

PAIR_METRIC, RATIO_METRIC = "rack.pair_busbw", "rack.pair_busbw_vs_median"

AR_METRIC, AR_OK_METRIC = "rack.allreduce_busbw", "rack.allreduce_correct"

SENDER = "from"  # the node whose workload sent a record (set by the controller)

# Both ends of a link report it; their values must agree within this fraction of the
# larger one (honest ends share the slower end's time, so they agree exactly).
AGREE_TOLERANCE = 0.10

# A NIC's line rate where its profile states none (the running half's default too).
DEFAULT_LINE_GBPS = 400.0

# Bits to bytes: a pair's bus bandwidth on one rail (two ranks: busbw = algbw = the bytes
# each way per second) can never exceed its NIC's line rate / 8 (400 Gb/s = 50 GB/s).
BITS_PER_BYTE = 8

# A link: its two ends' node names, sorted, and its rail
Link = tuple[str, str, str]


@dataclass(frozen=True)
class Floors:
    """One node's rack-level limits, from its controller-side profile."""

    pair: ThresholdRecord | None
    ratio: ThresholdRecord | None
    allreduce: ThresholdRecord | None
    allreduce_ok: ThresholdRecord | None
    strict: bool = False  # the site's provisional_limits: strict
    line_gbps: float | None = None  # the profile's NIC line rate (inventory.nic.rate_gbps)

    @classmethod
    def of(cls, profile: Profile) -> Floors:
        def first(metric: str) -> ThresholdRecord | None:
            ts = [t for t in profile.thresholds_for(metric) if not t.labels]
            return threshold_record(ts[0]) if ts else None

        nic = (getattr(profile, "inventory", None) or {}).get("nic") or {}
        rate = nic.get("rate_gbps") if isinstance(nic, dict) else None
        return cls(first(PAIR_METRIC), first(RATIO_METRIC), first(AR_METRIC),
                   first(AR_OK_METRIC), bool(getattr(profile, "provisional_strict", False)),
                   float(rate) if isinstance(rate, int | float) and rate > 0 else None)


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


class FabricMembers(TypedDict):
    """Who of a fabric's planned nodes take part in its rack step (rackready.decide.rack.groups)."""

    planned: list[str]
    members: list[str]
    left_out: list[LeftOut]


def groups(plan: Plan, judgements: Mapping[str, Judgement],
           sessions: dict[str, dict[str, Any]]) -> dict[str, FabricMembers]:
    """fabric -> the nodes planned on it, those taking part, and those left out and why."""
    out: dict[str, FabricMembers] = {}
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


def _looser(ts: list[ThresholdRecord | None]) -> ThresholdRecord | None:
    """The looser of the ends' floors ('>=' limits): the slower end bounds a link."""
    have = [t for t in ts if t]
    return min(have, key=lambda t: float(t["value"])) if have else None


def _outcome(value: Any, t: ThresholdRecord | None, strict: bool) -> str:
    """pass, below_expected or fail, as the node judge decides (validation.judge)."""
    if t is None:
        return "fail"  # a judged metric without a limit never passes
    return limit_outcome(Threshold.from_dict(t), value, strict)


def _limit(t: ThresholdRecord | None) -> str:
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
    # the reference is never movable past what a link can carry: a figure above its
    # line rate is a finding against the two ends that agreed on it, not a measurement
    caps = {_link(r): _cap(r, floors) for r in pairs}
    carried = [r for r in pairs if not r["labels"].get("refused")
               and float(r["value"]) <= caps[_link(r)][0]]
    median = statistics.median(float(r["value"]) for r in carried) if carried else None
    best = _own_best(carried)
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
        cap, cap_words = caps[_link(r)]
        ratio = round(value / median, 4) if median and value <= cap else None
        refused = lb.get("refused", "")
        missed: list[Miss] = []
        outcomes: list[str] = []
        if refused:
            outcomes.append("fail")
            missed.append(_mk(PAIR_METRIC, value, "GB/s", floor,
                              f"link {link_words(r)} refused: {refused}"))
        elif value > cap:
            outcomes.append("fail")
            missed.append(_mk(PAIR_METRIC, value, "GB/s",
                              {"metric": PAIR_METRIC, "op": "<=", "value": cap,
                               "unit": "GB/s", "tier": "spec",
                               "provenance": f"line rate: {cap_words} (the lower of the "
                                             "ends' NICs in their profiles)"},
                              f"link {link_words(r)}: {value} GB/s is above the line rate "
                              f"({cap_words}): a figure no link carries, reported by both "
                              "ends; judged against them, never as a measurement"))
        else:
            got_pair = _outcome(value, floor, strict)
            if got_pair != "pass":
                outcomes.append(got_pair)
                missed.append(_mk(PAIR_METRIC, value, "GB/s", floor,
                                  f"link {link_words(r)}: {value} GB/s, limit {_limit(floor)}"))
            if ratio is not None and _outcome(ratio, rfloor, strict) != "pass":
                assert median is not None  # a ratio is taken only against a median
                # each end is held to the fabric median only as far as its own other
                # links bear it out: a majority's figures alone never fail a node
                for got_ratio, against, borne in _ratio_ends(r, value, median, best,
                                                             rfloor, strict):
                    outcomes.append(got_ratio)
                    missed.append({**_mk(
                        RATIO_METRIC, ratio, "", rfloor,
                        f"link {link_words(r)}: {value} GB/s is {ratio} x the fabric's "
                        f"median rail ({round(median, 4)} GB/s), limit {_limit(rfloor)}"
                        + _ends_words(against, borne)), "against": against})
        fails = [m for m, o in zip(missed, outcomes, strict=True) if o == "fail"]
        below = [m for m, o in zip(missed, outcomes, strict=True) if o == "below_expected"]
        rows.append({"node_a": lb["node_a"], "node_b": lb["node_b"], "rail": int(lb["rail"]),
                     "nic_a": lb["nic_a"], "nic_b": lb["nic_b"], "value": value,
                     "unit": "GB/s", "vs_median": ratio, "refused": refused,
                     "simulated": lb.get("simulated", ""), "threshold": floor,
                     "outcome": "fail" if fails else "below_expected" if below else "pass",
                     "failures": fails, "below_expected": below})
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


def _mk(metric: str, value: float, unit: str, threshold: ThresholdRecord | None,
        message: str) -> Miss:
    return {"metric": metric, "value": value, "unit": unit, "threshold": threshold,
            "message": message}


def _cap(rec: dict[str, Any], floors: dict[str, Floors]) -> tuple[float, str]:
    """The most a link can carry each way (GB/s) and how: the lower of its two ends'
    NIC line rates (the controller-side profiles, never the nodes' word) / 8."""
    lb = rec["labels"]
    rates = [(f.line_gbps or DEFAULT_LINE_GBPS) if f else DEFAULT_LINE_GBPS
             for f in (floors.get(lb["node_a"]), floors.get(lb["node_b"]))]
    gbps = min(rates)
    cap = gbps / BITS_PER_BYTE
    return cap, f"{gbps:g} Gb/s / {BITS_PER_BYTE} = {cap:g} GB/s each way"


def _own_best(carried: list[dict[str, Any]]) -> dict[str, list[tuple[float, Link]]]:
    """node -> its plausible carried links as (value, link), fastest first."""
    out: dict[str, list[tuple[float, Link]]] = {}
    for r in carried:
        for end in (r["labels"]["node_a"], r["labels"]["node_b"]):
            out.setdefault(str(end), []).append((float(r["value"]), _link(r)))
    for links in out.values():
        links.sort(key=lambda x: -x[0])
    return out


def _ratio_ends(rec: dict[str, Any], value: float, median: float,
                best: dict[str, list[tuple[float, Link]]], rfloor: ThresholdRecord | None,
                strict: bool) -> list[tuple[str, list[str], bool]]:
    """(outcome, ends, borne out) for a link under the median's ratio: each end against
    the lower of the fabric median and its own fastest other link. An end whose own
    links are all this slow is named below_expected, never failed: the others' figures
    alone (three colluders agreeing on fast links among themselves) cannot fail it,
    while a colluder's own fast links hold it to the median."""
    link = _link(rec)
    by: dict[tuple[str, bool], list[str]] = {}
    for end in (str(rec["labels"]["node_a"]), str(rec["labels"]["node_b"])):
        other = next((v for v, lk in best.get(end, []) if lk != link), None)
        ref = min(median, other) if other else None
        got = _outcome(round(value / ref, 4), rfloor, strict) if ref else "pass"
        key = (got, True) if got != "pass" else ("below_expected", False)
        by.setdefault(key, []).append(end)
    return [(o, ends, borne) for (o, borne), ends in sorted(by.items())]


def _ends_words(against: list[str], borne: bool) -> str:
    if not borne:
        return (f"; not failed for {' and '.join(against)}: none of its own other links "
                "is faster, and the others' figures alone never fail a node")
    if len(against) == 2:
        return ""
    return (f"; counts against {against[0]}, whose own other links are faster (either "
            "its peer is slow on every link, or these figures are not to be trusted)")


def _link(rec: dict[str, Any]) -> Link:
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
    by_link: dict[Link, dict[str, dict[str, Any]]] = {}
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
        # a node is suspect only where each failing pair's failure counts against it
        common = set.intersection(*(_failed_ends(r) for r in bad))
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


def _failed_ends(row: PairRow) -> set[str]:
    return {e for f in row["failures"] for e in f.get("against") or
            (row["node_a"], row["node_b"])}


def _implausible(f: Miss) -> bool:
    """A miss of the line rate (an upper bound), not of a floor."""
    t = f["threshold"]
    return t is not None and t.get("op") == "<="


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
                    if me not in (f.get("against") or (me,)):
                        continue  # the miss is borne out by the other end's links only
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
                        "remediation": (
                            "this node and its peer agreed on a figure above the line rate: "
                            "their rack measurements are not to be trusted; reinstall the "
                            "bundle and re-run the rack step (invoke validate --inventory)"
                            if _implausible(f) else
                            f"{where}: port state, cable and transceiver on rail "
                            f"{r['rail']}, then the switch port; re-run the rack "
                            "step (invoke validate --inventory)"),
                    })
    return out
