"""CLI exit codes: 0 done, 1 not PASS / hash mismatch, 2 a person's mistake (no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_synthetic import healthy_and_faulty, result, write_run

from rackready.report.cli import main


def test_build_summary_sign_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = healthy_and_faulty(tmp_path / "run")
    assert main(["build", "--run", str(run), "--formats", "json,html,junit"]) == 0
    assert "gpu02  FAIL" in capsys.readouterr().out
    assert main(["summary", "--run", str(run)]) == 1
    rep = run / "report" / "node-gpu01.json"
    assert main(["sign", "--report", str(rep), "--operator", "Dana Tech"]) == 0
    assert "Dana Tech" in (run / "report" / "node-gpu01.html").read_text()
    assert main(["verify", "--report", str(rep)]) == 0
    doc = json.loads(rep.read_text())
    doc["signoff"]["name"] = "Mallory"
    rep.write_text(json.dumps(doc))
    assert main(["verify", "--report", str(rep)]) == 1


def test_summary_of_a_passing_run_exits_zero(tmp_path: Path) -> None:
    assert main(["summary", "--run", str(write_run(tmp_path / "r", [result("gpu01")]))]) == 0


@pytest.mark.parametrize("argv", [
    ["build", "--run", "/nonexistent/run"],
    ["build", "--run", ".", "--formats", "docx"],
    ["verify", "--report", "/nonexistent.json"],
    ["diff", "/nonexistent/a", "/nonexistent/b"],
])
def test_mistakes_exit_2_with_one_line(argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "rackready.report", *argv],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(("error:", "python -m"))
