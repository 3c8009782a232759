"""The records rackready.decide writes and report/ and steps/ read: a node's judgement
(<node>/judgement.json), its verdicts and limits record, the rack step's fabric groups
(<run>/_rack/rack.json) and the rack's judgement (<run>/_rack/judgement.json).

TypedDicts: plain dicts at run time (the JSON on disk is what it was), their keys
checked by mypy. Python 3.10, the floor, has no typing.NotRequired: a key that may be
absent sits in a `total=False` base.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, cast

from validation.model import Op, Outcome, Threshold, Tier, Value

NodeOutcome = Literal["PASS", "FAIL", "INCOMPLETE", "PARTIAL"]
GroupOutcomeName = Literal["PASS", "FAIL", "INCOMPLETE", "NOT_APPLICABLE"]
Scope = Literal["node", "fleet", "rack"]


class _ThresholdOptional(TypedDict, total=False):
    """Absent from a limit the rack step words itself (a link's line rate); readers take
    a missing tier as "spec", as validation.model.Threshold.from_dict does."""

    outlier_k: float | None
    labels: dict[str, str] | None
    gross: float | None
    tier: Tier


class ThresholdRecord(_ThresholdOptional):
    """validation.model.Threshold.to_dict: a limit as verdicts and judgements carry it."""

    metric: str
    op: Op
    value: Any  # as validation.model.Threshold.value: a number, a word or a list of them
    unit: str
    provenance: str


def threshold_record(t: Threshold) -> ThresholdRecord:
    """The one place the controller takes Threshold.to_dict's keys as ThresholdRecord's."""
    return cast(ThresholdRecord, t.to_dict())


class VerdictRecord(TypedDict):
    """validation.model.Verdict.to_dict, with the scope and the failing part in words."""

    check: str
    metric: str
    outcome: Outcome
    value: Value
    unit: str
    labels: dict[str, str]
    threshold: ThresholdRecord | None
    message: str
    remediation: str
    spread: dict[str, float] | None
    scope: Scope
    component: str  # rackready.decide.outcome.component_words


class ScopeRecord(TypedDict):
    """What the run covered (rackready.decide.node._Context.scope_record)."""

    partial: bool
    only: list[str] | None
    gpus: int | None
    without: list[str]
    waivers_from: str
    level: str
    missing_checks: list[str]


class _LimitCounts(TypedDict, total=False):
    """Counted by decide_node (rackready.decide.limits.limits_record); judge_node's first
    record holds the site's choices only."""

    judged: int
    spec: int
    measured: int
    provisional: int
    calibrated: int
    below_expected: int


class Limits(_LimitCounts):
    """How many verdicts rest on each tier of limit, and the site's choices."""

    provisional_limits: str  # "gross" or "strict"
    calibration: str


class BmcRecord(TypedDict):
    """What the report shows of the node's BMC (rackready.decide.node._bmc_record)."""

    address: str | None
    status: str | None
    problem: str
    since: str | None
    since_source: str
    identity: dict[str, Any]  # what the BMC said of itself (rackready.steps.oob.identity)
    log_excerpt: list[dict[str, str]]  # rackready.steps.oob.excerpt
    check: dict[str, Any] | None  # validation.model.CheckResult.to_dict
    envelope: dict[str, Any]  # rackready.steps.envelope.series: the readings under load


class GoldenPoint(TypedDict):
    step: float
    loss: float


class _Decided(TypedDict, total=False):
    """Keys written after the record is made: decide_node's outcome and reason (on every
    judgement judge_node returns) and the rack step's verdicts (only where it named the
    node)."""

    outcome: NodeOutcome
    outcome_reason: str
    rack_verdicts: list[VerdictRecord]


class Judgement(_Decided):
    """One node's judgement: <node>/judgement.json (rackready.decide.node.judge_node)."""

    node: str
    by: str  # "controller"
    judged: str  # ISO 8601
    profile: str | None
    profile_sha256: str | None
    level: str
    scope: ScopeRecord
    complete: bool
    node_claimed_outcome: str | None
    verdicts: list[VerdictRecord]
    fleet_verdicts: list[VerdictRecord]
    thresholds: list[ThresholdRecord]
    golden_loss: list[GoldenPoint]
    problems: list[str]
    integrity: list[dict[str, str]]  # rackready.decide.integrity's findings
    bmc: BmcRecord
    limits: Limits


class _MissEnds(TypedDict, total=False):
    against: list[str]  # the ends it counts against (rackready.decide.rack); absent: both


class Miss(_MissEnds):
    """One limit a rack link missed."""

    metric: str
    value: float
    unit: str
    threshold: ThresholdRecord | None
    message: str


class PairRow(TypedDict):
    """One link of a fabric, judged (rackready.decide.rack.judge_group)."""

    node_a: str
    node_b: str
    rail: int
    nic_a: str
    nic_b: str
    value: float
    unit: str
    vs_median: float | None
    refused: str
    simulated: Any  # the nodes' label, as they sent it
    threshold: ThresholdRecord | None
    outcome: str  # "pass", "below_expected" or "fail"
    failures: list[Miss]
    below_expected: list[Miss]


class AllreduceRecord(TypedDict):
    check: str
    value: Any  # rank 0's figures and labels, as it sent them
    unit: str
    correct: Any
    labels: dict[str, Any]
    threshold: ThresholdRecord | None
    outcome: str
    message: str


class Suspect(TypedDict):
    node: str
    rail: int
    nic: str
    why: str


class LeftOut(TypedDict):
    node: str
    reason: str


class GroupOutcome(TypedDict):
    """A fabric group's outcome and reason (rackready.decide.outcome.group_outcome)."""

    outcome: GroupOutcomeName
    outcome_reason: str


class RackGroup(TypedDict):
    """One fabric's rack-level judgement (rackready.decide.rack.judge_group)."""

    fabric: str
    planned: list[str]
    members: list[str]
    left_out: list[LeftOut]
    outcome: GroupOutcomeName
    outcome_reason: str
    median_rail_gbps: float | None
    allreduce: AllreduceRecord | None
    pairs: list[PairRow]
    suspects: list[Suspect]
    problems: list[str]


class RackStep(TypedDict, total=False):
    """<run>/_rack/rack.json (rackready.steps.rack); {} when the run had no rack step."""

    started: str
    groups: list[RackGroup]
    finished: str


class RackStepOutcome(TypedDict):
    fabric: str | None
    outcome: str | None


class RackJudgement(TypedDict):
    """The rack's judgement: <run>/_rack/judgement.json (decide.outcome.rack_judgement)."""

    by: str  # "controller"
    outcome: NodeOutcome
    outcome_reason: str
    nodes: dict[str, NodeOutcome | None]  # node -> its judgement's outcome
    rack_step: list[RackStepOutcome]
