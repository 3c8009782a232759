"""Loader: run-dir layouts, incomplete nodes rebuilt from events, input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report_synthetic import events_for, healthy_and_faulty, result, write_node, write_run

from rackready.report.errors import ReportError
from rackready.report.loader import load_run


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
    assert [n.name for n in data.nodes] == ["h200-vm"]
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
    assert any("unreadable line" in p for p in node.problems)
    assert node.result["simulated"] is True


def test_truncated_result_json_falls_back_to_events(tmp_path: Path) -> None:
    d = write_node(tmp_path, result("gpu01"))
    text = (d / "result.json").read_text()
    (d / "result.json").write_text(text[: len(text) // 2])
    node = load_run(tmp_path).nodes[0]
    assert not node.complete
    assert any("unreadable" in p for p in node.problems)


@pytest.mark.parametrize("mutate, words", [
    (lambda d: (d / "run.json").write_text("{not json"), "run.json: not valid JSON"),
    (lambda d: (d / "run.json").write_text('{"inventory": "x"}'), "string run_id"),
    (lambda d: (d / "gpu01" / "result.json").write_text('{"checks": 3, "outcome": "PASS"}'),
     "checks must be a list"),
    (lambda d: (d / "gpu01" / "result.json").write_text(
        json.dumps({**result("gpu01"), "verdicts": [{"metric": "x"}]})), "malformed"),
    (lambda d: (d / "gpu01" / "result.json").write_text(
        json.dumps({**result("gpu01"), "outcome": "OK"})), "outcome must be"),
])
def test_bad_input_is_one_clear_error(tmp_path: Path, mutate, words: str) -> None:
    run = write_run(tmp_path / "run", [result("gpu01")])
    mutate(run)
    with pytest.raises(ReportError, match=words) as e:
        load_run(run)
    assert "\n" not in str(e.value)


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
