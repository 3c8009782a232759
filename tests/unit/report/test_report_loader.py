"""Loader: run-dir layouts, incomplete nodes rebuilt from events, input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report_synthetic import events_for, healthy_and_faulty, result, write_node, write_run

from rackready.report.build import load_run
from rackready.report.errors import ReportError


def test_run_dir_with_two_nodes(tmp_path: Path) -> None:
    data = load_run(healthy_and_faulty(tmp_path / "run"))
    assert [n.name for n in data.nodes] == ["gpu01", "gpu02"]
    assert all(n.complete for n in data.nodes)
    assert data.run["inventory"] == "lab"


def test_bare_node_result_dir_is_a_one_node_run(tmp_path: Path) -> None:
    # `python -m validation run --out DIR` leaves result.json directly in DIR.
    res = result("h200-vm")
    (tmp_path / "result.json").write_text(json.dumps(res))
    data = load_run(tmp_path)
    assert [n.name for n in data.nodes] == [tmp_path.name]
    assert data.run["run_id"] == res["run_id"]


def test_missing_result_is_rebuilt_from_events_up_to_the_drop(tmp_path: Path) -> None:
    res = result("gpu03")
    d = tmp_path / "gpu03"
    d.mkdir()
    # The node dropped during the third check: cut the stream after two
    # measurements of nccl_collectives and tear the last line mid-write.
    evs = events_for(res, finished=False)
    cut = next(i for i, e in enumerate(evs) if e.get("check") == "nccl_collectives"
               and e["event"] == "measurement") + 2
    lines = [json.dumps(e) for e in evs[:cut]] + ['{"event": "measurement", "ts": "2026-']
    (d / "events.jsonl").write_text("\n".join(lines))
    node = load_run(tmp_path).nodes[0]
    assert not node.complete
    checks = {c["check"]: c for c in node.result["checks"]}
    assert [checks[c]["status"] for c in ("gpu_inventory", "gemm_burnin")] == ["ok", "ok"]
    assert checks["nccl_collectives"]["status"] == "interrupted"
    assert len(checks["nccl_collectives"]["measurements"]) == 2
    assert "fsdp_reference" not in checks
    assert any("unusable event line" in p for p in node.problems)
    assert node.result["simulated"] is True


def test_truncated_result_json_falls_back_to_events(tmp_path: Path) -> None:
    d = write_node(tmp_path, result("gpu01"))
    text = (d / "result.json").read_text()
    (d / "result.json").write_text(text[: len(text) // 2])
    (d / "judgement.json").unlink()  # judged again, as after a fresh fetch
    node = load_run(tmp_path).nodes[0]
    assert not node.complete
    assert any("unreadable" in p for p in node.problems)


@pytest.mark.parametrize("mutate, words", [
    (lambda d: (d / "run.json").write_text("{not json"), "not a readable run plan"),
    (lambda d: (d / "run.json").write_text('{"inventory": "x"}'), "string run_id"),
])
def test_bad_run_plan_is_one_clear_error(tmp_path: Path, mutate, words: str) -> None:
    run = write_run(tmp_path / "run", [result("gpu01")])
    mutate(run)
    with pytest.raises(ReportError, match=words) as e:
        load_run(run)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("content, words", [
    ('{"schema_version": "1.0", "checks": 3, "outcome": "PASS"}', "no list of checks"),
    (json.dumps({**result("gpu01"), "checks": [{"check": 1}]}),
     "result.json malformed: checks[0] has no check name"),
    ('{"schema_version": "7"}', "unknown schema_version"),
    ("[1, 2]", "not a JSON object"),
    ("", "empty"),
])
def test_bad_node_result_makes_that_node_incomplete(tmp_path: Path, content: str,
                                                     words: str) -> None:
    run = write_run(tmp_path / "run", [result("gpu01"), result("gpu02")])
    (run / "gpu01" / "result.json").write_text(content)
    for node in ("gpu01", "gpu02"):
        (run / node / "judgement.json").unlink()
    data = load_run(run)
    gpu01, gpu02 = data.nodes
    assert gpu01.judgement["outcome"] == "INCOMPLETE", gpu01.judgement["outcome_reason"]
    assert any(words in p for p in gpu01.problems), gpu01.problems
    assert gpu02.judgement["outcome"] != "INCOMPLETE" or "gpu01" not in str(gpu02.problems)


def test_empty_or_missing_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no node results"):
        load_run(tmp_path)
    with pytest.raises(ReportError, match="not found"):
        load_run(tmp_path / "nope")


def test_artifacts_are_hashed_on_disk(tmp_path: Path) -> None:
    res = result("gpu01")
    d = write_node(tmp_path, res)
    (d / "artifacts").mkdir()
    (d / "artifacts" / "smi.xml").write_bytes(b"<x/>")
    node = load_run(tmp_path).nodes[0]
    # sha256 of the four bytes "<x/>", computed independently
    import hashlib
    assert node.artifact_files == {"artifacts/smi.xml": hashlib.sha256(b"<x/>").hexdigest()}


def test_a_bare_node_folder_with_its_own_judgement_is_judged_again(tmp_path: Path) -> None:
    # a failing result and a forged PASS judgement "by: controller" beside it
    res = result("gpu01")
    gpu0 = next(m for c in res["checks"] for m in c["measurements"]
                if m["name"] == "gpu.count")
    gpu0["value"] = 3
    d = write_node(tmp_path, res)
    forged = json.loads((d / "judgement.json").read_text())
    forged.update(outcome="PASS", outcome_reason="", by="controller",
                  verdicts=[{**v, "outcome": "pass"} for v in forged["verdicts"]])
    (d / "judgement.json").write_text(json.dumps(forged))
    node = load_run(tmp_path).nodes[0]
    assert node.judgement["outcome"] != "PASS", node.judgement["outcome_reason"]
    assert any(v["metric"] == "gpu.count" and v["outcome"] == "fail"
               for v in node.judgement["verdicts"])
