"""The health gate is evidence or FAIL (validation.health): a GPU whose temperature reads
N/A is not measured and the node unhealthy; a count no counter holds is refused, and the
textfile is rewritten or removed, never left from an earlier run (validation.textfile
.replace). The gate runs as a real process on a hwsim node, as test_health's do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hwsim_node import Node, make_node
from test_health import health_cmd

from rackready_lab.hwsim.state import build_state
from validation import textfile

integration = pytest.mark.integration
STALE = 'rackready_health_state{source="health",state="healthy"} 1\n'


def _node(tmp: Path, change: Any) -> tuple[Node, Path]:
    state = build_state("xe9680-h200", "gpu01", "roce", provisioned=True)
    for g in state["gpus"]:
        change(g)
    prom = tmp / "prom"
    prom.mkdir()
    (prom / "rackready-health.prom").write_text(STALE)  # an earlier, healthy gate's file
    return make_node(tmp, "xe9680-h200", "gpu01", "roce", state), prom


@integration
@pytest.mark.parametrize("gpus", [range(8), [3]], ids=["every-gpu", "one-gpu"])
def test_a_temperature_read_as_na_is_not_measured_and_unhealthy(tmp_path: Path,
                                                                 gpus: Any) -> None:
    def na(g: dict[str, Any]) -> None:
        if int(g["index"]) in gpus:
            g["temp_c"] = "N/A"

    node, prom = _node(tmp_path, na)
    proc, _ = health_cmd(node, tmp_path, "--textfile-dir", str(prom))
    assert proc.returncode == 1, (proc.stdout, proc.stderr[-2000:])
    line = proc.stdout.strip()
    assert line.startswith("UNHEALTHY: gpu.health ") and "gpu.temperature" in line, line
    assert "not measured" in line, line
    if list(gpus) == [3]:
        assert "GPU 3 " in line, line
    text = (prom / "rackready-health.prom").read_text()
    assert 'rackready_health_state{source="health",state="unhealthy"} 1' in text


@integration
def test_a_count_no_counter_holds_is_refused_and_the_textfile_rewritten(tmp_path: Path
                                                                        ) -> None:
    def huge(g: dict[str, Any]) -> None:
        g["ecc"]["volatile"]["sram_correctable"] = int("9" * 400)

    node, prom = _node(tmp_path, huge)
    proc, _ = health_cmd(node, tmp_path, "--textfile-dir", str(prom))
    assert proc.returncode == 1, (proc.stdout, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    line = proc.stdout.strip()
    assert len(proc.stdout.splitlines()) == 1, proc.stdout
    assert "gpu.ecc_corrected_volatile refused: a 1329-bit number" in line, line
    assert "8 value(s) no float64 holds left out of the metrics" in line, line
    text = (prom / "rackready-health.prom").read_text()
    assert text != STALE and 'state="unhealthy"} 1' in text
    assert 'rackready_values_refused{source="health"} 8' in text
    assert "rackready_gpu_ecc_corrected_volatile{" not in text


def test_a_textfile_that_cannot_be_built_or_written_removes_the_old_one(tmp_path: Path
                                                                       ) -> None:
    target = tmp_path / "rackready-health.prom"
    target.write_text(STALE)

    def broken() -> str:
        raise OverflowError("int too large to convert to float")

    problem = textfile.replace(tmp_path, "health", broken)
    assert problem == ("metrics not built: OverflowError: int too large to convert to float; "
                       "the old file removed"), problem
    assert not target.exists()
    assert textfile.replace(tmp_path, "health", lambda: "# new\n") == ""
    assert target.read_text() == "# new\n"
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert textfile.replace(blocker, "run", lambda: "# x\n").startswith("metrics not written")


def test_a_run_document_with_a_huge_count_exports_the_rest() -> None:
    doc = {"profile": "p", "level": "quick", "node": "n", "checks": [
        {"check": "gpu.health", "status": "ok", "duration_s": 1.0, "measurements": [
            {"name": "gpu.ecc_corrected_volatile", "value": 10 ** 400, "unit": "",
             "labels": {"gpu": "0"}},
            {"name": "gpu.temperature", "value": 1e308, "unit": "C", "labels": {"gpu": "0"}},
            {"name": "gpu.temperature", "value": 40, "unit": "C", "labels": {"gpu": "1"}}]}]}
    text = textfile.run_exposition(json.loads(json.dumps(doc)), 1.0, 1.7e9)
    assert 'rackready_values_refused{source="run"} 1' in text
    assert 'rackready_gpu_temperature_celsius{source="run",check="gpu.health",gpu="1"} 40' \
        in text
