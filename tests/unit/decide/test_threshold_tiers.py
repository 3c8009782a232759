"""Threshold tiers: a provisional limit fails only a gross fault; a shortfall above that
reads below expected in every format, and a site's provisional_limits: strict fails it.

The node results are the real 2x H200 run (tests/fixtures/h200x2-quick-result.json.gz,
unedited on disk); a GPU's HBM bandwidth is lowered here in code to make the shortfalls.
"""

from __future__ import annotations

import gzip
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rackready.report import build_reports
from rackready.report.render.summary import terminal_summary
from validation.judge import judge, limit_outcome
from validation.model import CheckResult, Measurement, Threshold
from validation.profile import ProfileError, check_threshold, load_profile, with_site

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "h200x2-quick-result.json.gz"
PROV = "PROVISIONAL until measured on enough machines: one healthy VM"


def _limit(**kw) -> Threshold:
    raw = {"metric": "hbm.bandwidth", "op": ">=", "value": 3950.0, "gross": 1980,
           "unit": "GB/s", "provenance": PROV, **kw}
    return check_threshold(raw, "test")


def test_a_provisional_floor_fails_only_past_its_gross_line():
    t = _limit()
    assert t.tier == "provisional" and t.gross == 1980
    assert limit_outcome(t, 4282.8) == "pass"
    assert limit_outcome(t, 3000.0) == "below_expected"
    assert limit_outcome(t, 1500.0) == "fail"
    assert limit_outcome(t, 3000.0, strict=True) == "fail"
    assert limit_outcome(t, None) == "fail"  # unread is never below expected
    # a spec limit has no margin: any miss fails
    spec = check_threshold({"metric": "gpu.count", "op": "==", "value": 8, "unit": "",
                            "provenance": "the order: 8 GPUs"}, "test")
    assert spec.tier == "spec" and limit_outcome(spec, 7) == "fail"
    # a provisional limit without a gross line (a health counter) fails on any miss
    assert limit_outcome(_limit(gross=None), 3000.0) == "fail"


@pytest.mark.parametrize("raw, words", [
    ({"gross": 4000}, "stricter than the limit"),
    ({"provenance": "the datasheet", "tier": "provisional"}, "does not say PROVISIONAL"),
    ({"tier": "spec"}, "tier spec but the provenance says PROVISIONAL"),
    ({"tier": "guessed"}, "not one of"),
    ({"gross": "half"}, "must be a number"),
    ({"op": "==", "value": 1}, "provisional >= or <= limit only"),
])
def test_the_profile_loader_refuses_a_tier_or_gross_line_that_does_not_hold(raw, words):
    with pytest.raises(ProfileError, match=words):
        _limit(**raw)


def test_every_provisional_rate_of_the_base_profiles_states_its_gross_line():
    """The base profiles' provisional floors on rates and bandwidths carry a gross line at
    0.7 x the floor (the rule their header states); none stricter, none missing. The rack
    step's floors are judged by rackready.decide.rack, which has no gross line yet: they
    fail on any miss."""
    for name in ("xe9680-h200", "xe9680-h100", "dl380a-gen12-h200nvl", "dl380a-gen11-h100nvl"):
        prof = load_profile(name)
        rates = [t for t in prof.thresholds if t.tier == "provisional" and t.op == ">="
                 and t.unit in ("GB/s", "Gb/s", "TFLOP/s", "tokens/s")
                 and not t.metric.startswith("rack.")]
        assert rates, name
        for t in rates:
            assert t.gross is not None and 0.69 * t.value <= t.gross <= 0.71 * t.value, t


def _hbm(value: float) -> list[CheckResult]:
    return [CheckResult("hbm", "ok", 1.0, (Measurement("hbm.bandwidth", value, "GB/s",
                                                        {"gpu": "0"}),))]


def test_the_judge_and_the_site_setting():
    prof = load_profile("xe9680-h200")
    [v] = [v for v in judge(_hbm(3000.0), prof) if v.metric == "hbm.bandwidth"
           and v.outcome != "not_applicable"]
    assert v.outcome == "below_expected" and "below expected" in v.message
    assert f"{v.threshold.gross:g}" in v.message and v.remediation  # what to look at
    [v] = [v for v in judge(_hbm(2000.0), prof) if v.metric == "hbm.bandwidth"
           and v.outcome != "not_applicable"]
    assert v.outcome == "fail"  # past the gross line: a halved HBM rate fails
    strict = with_site(prof, {"provisional_limits": "strict"})
    [v] = [v for v in judge(_hbm(3000.0), strict) if v.metric == "hbm.bandwidth"
           and v.outcome != "not_applicable"]
    assert v.outcome == "fail"
    with pytest.raises(ProfileError, match="provisional_limits must be gross or strict"):
        with_site(prof, {"provisional_limits": "lenient"})


@pytest.fixture
def run_with_shortfalls(tmp_path, monkeypatch):
    """The real run with GPU 1's HBM at 3000 GB/s: below the provisional 3950, above the
    gross line 2760. Judged against the checks its own suite ran."""
    from tests.unit.real_run_suite import judge_as_its_suite

    result = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    judge_as_its_suite(monkeypatch)  # its own suite's checks and metrics
    for c in result["checks"]:
        for m in c["measurements"]:
            if m["name"] == "hbm.bandwidth" and m["labels"]["gpu"] == "1":
                m["value"] = 3000.0
    node = tmp_path / "run" / "h200x2"
    node.mkdir(parents=True)
    (node / "result.json").write_text(json.dumps(result))
    return tmp_path / "run"


def test_below_expected_and_the_tier_count_show_in_every_format(run_with_shortfalls):
    run = run_with_shortfalls
    build_reports(run, {"json", "html", "junit"})
    doc = json.loads((run / "report" / "node-h200x2.json").read_text())
    below = [v for v in doc["verdicts"] if v["outcome"] == "below_expected"]
    assert [(v["metric"], v["labels"].get("gpu")) for v in below] == [("hbm.bandwidth", "1")]
    # the node's own standing is unchanged: only its result.json came back, so its cited
    # raw outputs are missing (INCOMPLETE), beside its true failures (NCCL pin, iommu=pt)
    assert doc["outcome"] == "INCOMPLETE"
    assert {v["check"] for v in doc["verdicts"] if v["outcome"] == "fail"} == {
        "kernel.cmdline", "nccl.version"}
    lim = doc["limits"]
    assert lim["below_expected"] == 1 and lim["provisional_limits"] == "gross"
    assert 0 < lim["provisional"] < lim["judged"] == sum(
        lim[k] for k in ("spec", "measured", "provisional", "calibrated"))
    judged = [v for v in doc["verdicts"] if v["outcome"] in ("pass", "fail", "below_expected")]
    assert lim["judged"] == len(judged)
    assert lim["provisional"] == sum(1 for v in judged if v["threshold"]
                                     and v["threshold"]["tier"] == "provisional")
    rack = json.loads((run / "report" / "rack.json").read_text())
    assert rack["nodes"][0]["limits"] == lim
    html = (run / "report" / "node-h200x2.html").read_text()
    assert 'id="below-expected"' in html and "[provisional; gross fault past 2,760 GB/s]" in html
    assert f"{lim['provisional']} of {lim['judged']} judged verdicts rest on provisional" in html
    assert "rest on provisional" in (run / "report" / "rack.html").read_text()
    suite = ET.fromstring((run / "report" / "junit.xml").read_text()).find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["limits_below_expected"] == "1" and props["limits_provisional"] == str(
        lim["provisional"])
    outs = [c for c in suite.iter("testcase")
            if (c.findtext("system-out") or "").startswith("BELOW EXPECTED")]
    assert len(outs) == 1 and outs[0].find("failure") is None
    text = terminal_summary(run)
    assert "hbm.bandwidth" in text and "below expected, provisional" in text
    assert "rest on provisional limits, 1 below expected" in text


def test_a_healthy_node_with_a_shortfall_passes_and_says_so():
    from rackready.decide.outcome import decide_node as _decide

    v = {"check": "hbm", "metric": "hbm.bandwidth", "outcome": "below_expected",
         "component": "GPU 1", "threshold": {"tier": "provisional"}}
    ok = {**v, "outcome": "pass"}
    j = {"verdicts": [ok, v], "fleet_verdicts": [], "problems": [], "complete": True,
         "profile_sha256": "x", "scope": {"missing_checks": [], "partial": False},
         "node_claimed_outcome": None, "level": "quick",
         "limits": {"provisional_limits": "gross", "calibration": ""}}
    _decide(j)
    assert j["outcome"] == "PASS"
    assert j["outcome_reason"].startswith("1 verdict(s) below expected on provisional limits")
    assert j["limits"]["below_expected"] == 1 and j["limits"]["provisional"] == 2
