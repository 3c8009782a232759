"""Evidence or FAIL, measurement by measurement: a healthy lab quick run (both lab
platforms, tests/fixtures/lab-quick-healthy) passes as the controller judges it; the same
run with any one metric's measurements removed fails, the verdict naming the metric as
"not measured" and the check that should have measured it. A check that ran "ok" and said
nothing is never a pass.

Judged in-process through the controller's own path (rackready.decide.node.judge_node on
the plan's node, its site and its BMC record), one metric at a time.
"""

from __future__ import annotations

import copy
import functools
import json
import lzma
from pathlib import Path
from typing import Any

import pytest

from rackready.decide import node as judging
from rackready.decide.node import judge_node
from rackready.run.rundir import NodeResult, Plan

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "lab-quick-healthy"
NODES = ("lab-gpu01", "lab-gpu02")


@functools.cache
def _run(node: str) -> tuple[Plan, dict[str, Any], dict[str, Any]]:
    plan = Plan.from_dict(json.loads((FIXTURE / "run.json").read_text()))
    result = json.loads(lzma.decompress((FIXTURE / node / "result.json.xz").read_bytes()))
    bmc = json.loads(lzma.decompress((FIXTURE / node / "bmc.json.xz").read_bytes()))
    return plan, result, bmc


@pytest.fixture(autouse=True)
def _the_fixtures_checks(monkeypatch):
    """The level's checks as the run's suite had them (a check added later was never the
    fixture's to report: judged against its own suite, not INCOMPLETE for that); each
    node's profile loaded once (the same frozen profile every judgement loads)."""
    _, result, _ = _run(NODES[0])
    ran = [c["check"] for c in result["checks"]]
    monkeypatch.setattr(judging, "expected_checks", lambda level, only: list(only or ran))
    monkeypatch.setattr(judging, "load_judging_profile", _profile)


@functools.cache
def _profile_of(name: str, without: tuple[str, ...], gpus: int | None, site: str) -> Any:
    return LOAD(name, without, gpus, json.loads(site))


LOAD = judging.load_judging_profile


def _profile(name: str, without: tuple[str, ...], gpus: int | None, site: dict[str, Any]
             ) -> Any:
    return _profile_of(name, without, gpus, json.dumps(site, sort_keys=True))


def _judge(node: str, result: dict[str, Any], bmc: dict[str, Any]) -> dict[str, Any]:
    plan, _, _ = _run(node)
    j, _, _ = judge_node(node, plan.node(node), plan.level, None,
                         NodeResult(result=result, problems=[]), bmc=bmc, findings=[])
    return dict(j)


def _emitted(node: str) -> list[tuple[str, str]]:
    """Every (check, metric) the healthy run emitted that a limit of its profile judges."""
    plan, result, bmc = _run(node)
    limited = {t["metric"] for t in _judge(node, result, bmc)["thresholds"]}
    pairs = {(c["check"], m["name"]) for c in [*result["checks"], bmc["check"]]
             for m in c["measurements"] if m["name"] in limited}
    return sorted(pairs)


def _without(record: dict[str, Any], check: str, metric: str) -> dict[str, Any]:
    out = copy.copy(record)
    out["measurements"] = [m for m in record["measurements"] if m["name"] != metric] \
        if record["check"] == check else record["measurements"]
    return out


def test_the_healthy_lab_run_passes_as_the_controller_judges_it():
    for node in NODES:
        _, result, bmc = _run(node)
        j = _judge(node, result, bmc)
        assert j["outcome"] == "PASS", (node, j["problems"][:3])
        # every limit judged or explained: none read the old generic reason
        assert not [v for v in j["verdicts"] if "not measured in this run" in v["message"]]


def _pairs() -> list[tuple[str, str, str]]:
    """Each (check, metric) once: on the first node that emitted it (the DL380a-like node
    adds what the XE9680-like one lacks: InfiniBand, its iLO)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for node in NODES:
        for pair in _emitted(node):
            if pair not in seen:
                seen.add(pair)
                out.append((node, *pair))
    return out


PAIRS = _pairs()


@pytest.mark.parametrize("node, check, metric", PAIRS,
                         ids=[f"{n}:{c}:{m}" for n, c, m in PAIRS])
def test_a_metric_removed_fails_the_node_as_not_measured(node, check, metric):
    _, result, bmc = _run(node)
    edited = {**result, "checks": [_without(c, check, metric) for c in result["checks"]]}
    bmc_edited = {**bmc, "check": _without(bmc["check"], check, metric)}
    j = _judge(node, edited, bmc_edited)
    assert j["outcome"] == "FAIL"
    said = [v["message"] for v in j["verdicts"]
            if v["outcome"] == "fail" and v["metric"] == metric]
    assert said and all("not measured" in s and check in s for s in said), said
