"""bench/summarize.py on a recorded bench output (tests/fixtures/bench): the table it prints."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rackready.site.paths import PROJECT_ROOT

REPO = PROJECT_ROOT
RECORDED = REPO / "tests" / "fixtures" / "bench" / "h200x2-2026-11-30"
SCRIPT = REPO / "bench" / "summarize.py"


def summarize(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(folder), *extra], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def rows_of(table: str) -> dict[str, list[str]]:
    out = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out[cells[0]] = cells[1:]
    return out


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    w = tmp_path / "w"
    shutil.copytree(RECORDED, w)  # summarize writes results.json and table.md beside the data
    return w


def test_recorded_layout_has_the_burnin_interval_logs():
    # what once crashed summarize: JSON lines that are not measurements, beside ones that are
    logs = sorted(p.name for p in (RECORDED / "gemm").glob("*.jsonl"))
    assert logs == ["gemm_burnin.rank0.jsonl", "gemm_burnin.rank1.jsonl",
                    "intervals.rank0.jsonl", "intervals.rank1.jsonl"]
    first = json.loads((RECORDED / "gemm" / "intervals.rank0.jsonl").read_text().splitlines()[0])
    assert "name" not in first and "labels" not in first


def test_table_of_the_recorded_bench(bench):
    proc = summarize(bench)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    # the interval logs are named as left out, not read as measurements
    assert "gemm/intervals.rank0.jsonl (no measurements)" in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "| what | ours | reference | ratio | target |"
    rows = rows_of(proc.stdout)
    # collectives against the real nccl-tests captures (the results note's ratios)
    assert rows["busbw all_reduce 64 MiB (GB/s)"][:3] == ["259.9", "272.2", "0.955"]
    assert rows["busbw sendrecv 4096 MiB (GB/s)"][:3] == ["364.4", "365.6", "0.997"]
    assert rows["busbw broadcast 1024 MiB (GB/s)"][:3] == ["367.3", "-", "-"]  # no capture
    assert sum(k.startswith("busbw ") for k in rows) == 6 * 4
    # burn-in against the bare matmul loop; fp8 has no bare reference
    assert rows["burn-in bf16 TFLOP/s gpu0 n=16384"][:3] == ["667.6", "670", "0.996"]
    assert rows["burn-in bf16 TFLOP/s gpu1 n=16384"][:3] == ["681.2", "682", "0.999"]
    assert rows["burn-in fp8 TFLOP/s gpu1 n=16384"][:3] == ["1242", "-", "-"]
    assert rows["gemm.power_fraction gpu1 bf16"][0] == "0.8671"  # the weak interval
    assert rows["gemm.sdc_mismatches gpu0"][0] == "0"
    assert rows["HBM copy GB/s gpu1"][:3] == ["4247", "4290", "0.990"]
    assert rows["host.h2d_bandwidth gpu0"][:3] == ["55.23", "55.2", "1.001"]
    assert rows["fsdp.mfu [fsdp8b_compile]"][0] == "0.5508"
    assert rows["loss first/last [quick]"][:2] == ["12.16", "1.81"]
    assert rows["scaling: tok/s/GPU at 2 GPUs over 1 GPU"][:3] == ["34770", "35553", "0.978"]
    # what it prints is what it writes
    assert (bench / "table.md").read_text() == proc.stdout
    res = json.loads((bench / "results.json").read_text())
    assert len(res["rows"]) == len(lines) - 2 and res["median_bare"] == 676.0


def test_torn_line_and_foreign_lines_are_left_out(bench):
    path = bench / "hbm" / "hbm.rank1.jsonl"
    with path.open("a") as fh:
        fh.write('{"name": "hbm.band')  # the workload was killed mid-write
    (bench / "notes.jsonl").write_text('{"step": 1}\n[1, 2]\n')
    proc = summarize(bench)
    assert proc.returncode == 0, proc.stderr
    assert "hbm/hbm.rank1.jsonl (1 unreadable line)" in proc.stderr
    assert "notes.jsonl (no measurements)" in proc.stderr
    assert rows_of(proc.stdout)["HBM copy GB/s gpu1"][0] == "4247"


def test_mistakes_are_one_line(tmp_path):
    proc = summarize(tmp_path / "absent")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    empty = tmp_path / "empty"
    (empty / "gemm").mkdir(parents=True)
    (empty / "gemm" / "intervals.rank0.jsonl").write_text('{"dtype": "bf16", "i": 0}\n')
    proc = summarize(empty)
    assert proc.returncode == 1 and "no measurements" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
