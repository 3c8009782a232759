"""bench/compare.py: the levels' table from one bench sitting, on recorded text.

nccl-tests: the real 2x H200 captures (tests/fixtures/hgx-h200-2gpu). rackready: the recorded
bench run (tests/fixtures/bench/h200x2-2026-11-30). torchtitan: lines in the exact format of
its v0.2.2 metric logger (torchtitan/components/metrics.py, ANSI colours included) carrying
the figures the bench notes quote (no capture of its log is stored).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rackready.site.paths import PROJECT_ROOT

REPO = PROJECT_ROOT
sys.path.insert(0, str(REPO / "bench"))

import compare  # noqa: E402

CAPTURES = REPO / "tests" / "fixtures" / "hgx-h200-2gpu"
RECORDED = REPO / "tests" / "fixtures" / "bench" / "h200x2-2026-11-30"


def titan_line(step: int, loss: float, mem: float, tps: int, mfu: float) -> str:
    red, green, orange, turq, blue, cyan, mag, reset = (
        "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[36m", "\x1b[34m", "\x1b[96m", "\x1b[35m",
        "\x1b[39m")
    return (f"[rank0]:[titan] 2026-11-30 12:00:00,000 - root - INFO - {red}step: {step:2}  "
            f"{green}loss: {loss:8.5f}  {orange}grad_norm: {1.2345:7.4f}  "
            f"{turq}memory: {mem:5.2f}GiB({mem / 139.8 * 100:.2f}%)  {blue}tps: {tps:,}  "
            f"{cyan}tflops: {tps * 0.0546:,.2f}  {mag}mfu: {mfu:.2f}%{reset}")


def titan_log(tps: list[int], mem: float, mfu: float) -> str:
    lines = ["[rank0]:[titan] ... Training starts at step 1"]
    for i, t in enumerate(tps, 1):
        lines.append(titan_line(i, 12.68 - i * 0.8, mem, t, mfu))
    return "\n".join(lines) + "\n"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    w = tmp_path / "w"
    (w / "nccl-tests").mkdir(parents=True)
    for f in CAPTURES.glob("nccl-tests-*.txt"):
        shutil.copy(f, w / "nccl-tests" / f"{f.stem.removeprefix('nccl-tests-')}.txt")
    for sub in ("coll", "bare", "gemm"):
        shutil.copytree(RECORDED / sub, w / sub)
    shutil.copytree(RECORDED / "fsdp8b_compile", w / "fsdp8b_none")
    # torchtitan AC none: the issue's 9,403-9,436 tok/s, 55.2 %, 101 GiB; selective 8,791-8,821
    (w / "titan_none.log").write_text(titan_log([3100, 9120, 9350, 9403, 9436, 9420], 101.2,
                                                55.2))
    (w / "titan_selective.log").write_text(titan_log([2900, 8700, 8791, 8821, 8800], 81.0,
                                                     51.5))
    (w / "levels-timing.txt").write_text("part1: level=quick rc=0 wall=40 s\n"
                                         "quick: level=quick rc=0 wall=175 s\n")
    return w


def rows_by_what(data: dict) -> dict[str, dict]:
    return {r["what"]: r for r in data["rows"]}


def test_titan_log_lines_parse():
    rows = compare.parse_titan_log(titan_log([3100, 9403, 9436, 9420], 101.2, 55.2))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["tps"] == 9403 and rows[1]["mem_gib"] == 101.2
    assert rows[1]["mfu"] == pytest.approx(0.552)
    s = compare.titan_summary(rows, skip=1)
    assert s["tps"] == 9420 and s["tps_range"] == (9403, 9436)  # step 1 (compile) left out
    assert compare.parse_titan_log("nothing here\n") == []


def test_level_timing_parse():
    got = compare.parse_level_timing("part1: level=quick rc=0 wall=40 s\n"
                                     "standard: level=standard rc=124 wall=555 s\n")
    assert got == {"standard": (124, 555)}  # the part-1 run is not the quick level's wall


def test_table_rows_from_one_sitting(work):
    md, data = compare.build(work)
    rows = rows_by_what(data)
    ag = rows["all_gather 4 GiB busbw GB/s"]
    # the recorded run measured out of place only (288.4); nccl-tests' better mode is in place
    assert ag["ref_best"] == pytest.approx(310.19)  # the capture: oop 286.2, ip 310.19
    assert ag["ratio"] == pytest.approx(288.4 / ag["ref_best"], rel=1e-4)
    assert ag["met"] is False and "ip 310.2" in ag["ref"]
    sr = rows["sendrecv 64 MiB busbw GB/s"]
    assert sr["ref_best"] == pytest.approx(274.49) and sr["met"] is False
    ar = rows["all_reduce 4 GiB busbw GB/s"]
    assert ar["ratio"] > 0.98 and ar["met"] is True
    # broadcast: no nccl-tests capture in the fixtures, so no ratio from elsewhere
    bc = rows["broadcast 64 MiB busbw GB/s"]
    assert bc["ref"] == "nccl-tests not run" and bc["met"] is None
    assert rows["quick level, wall"]["met"] is False and "175 s" in rows["quick level, wall"][
        "ours"]
    assert rows["standard level, wall"]["met"] is None
    fs = rows["reference job llama3-8b seq 8192 compiled, no activation checkpointing"]
    assert fs["titan"]["tps"] == pytest.approx(9420) and fs["ratio"] == pytest.approx(
        9409 / 9420, rel=1e-3)
    sel = rows["reference job llama3-8b seq 8192 compiled, selective activation checkpointing "
               "(torchtitan's default)"]
    assert sel["ours"] == "not run" and sel["met"] is None and sel["rackready"] is None
    assert "| all_gather 4 GiB busbw GB/s |" in md and data["summary"].endswith("not measured")
    gemm = [r for r in data["rows"] if r["what"].startswith("burn-in bf16")]
    assert len(gemm) == 2 and all(r["ratio"] for r in gemm)


def test_best_mode_and_graph_are_read(work):
    rec = {"name": "nccl.busbw", "value": 330.0, "unit": "GB/s",
           "labels": {"op": "all_gather", "size_bytes": str(4 << 30), "impl": "torch",
                      "ranks": "2", "mode": "in_place", "launch": "eager"}}
    g = {**rec, "value": 331.0, "labels": {**rec["labels"], "launch": "graph"}}
    with (work / "coll" / "collectives.rank0.jsonl").open("a") as f:
        f.write(json.dumps(rec) + "\n" + json.dumps(g) + "\n")
    ag = rows_by_what(compare.build(work)[1])["all_gather 4 GiB busbw GB/s"]
    assert ag["ours_best_mode"] == "in_place" and ag["ours_best"] == 330.0
    assert ag["met"] is True and ag["graph_ratio"] == pytest.approx(331.0 / ag["ref_best"])
    assert "ip 330.0" in ag["ours"] and "graph: ip 331.0" in ag["ours"]


def test_loss_curve_row_says_whether_every_window_falls(work):
    def row() -> dict:
        rows = rows_by_what(compare.build(work)[1])
        return next(r for w, r in rows.items() if w.startswith("reference job 8B loss"))

    assert row()["met"] is True  # the recorded curve falls 12.55 -> 8.32, window by window
    # the bench notes' 8B curve (no clipping, no decay): 12.55, 2.92, ... 11.73 ... 8.32
    issue = [12.55, 2.92, 3.04, 8.39, 3.87, 3.54, 2.87, 11.73, 9.45, 8.99, 8.50, 8.32]
    f = work / "fsdp8b_none" / "fsdp_train.rank0.jsonl"
    kept = [line for line in f.read_text().splitlines() if '"fsdp.loss"' not in line]
    kept += [json.dumps({"name": "fsdp.loss", "value": v, "unit": "",
                         "labels": {"step": str(i)}}) for i, v in enumerate(issue, 1)]
    f.write_text("\n".join(kept) + "\n")
    r = row()
    assert r["met"] is False and r["rise"] > 0 and "12.55, 2.92" in r["ours"]


def test_cli_errors_are_one_line(tmp_path):
    p = subprocess.run([sys.executable, str(REPO / "bench" / "compare.py"),
                        str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def _dupes(md: str) -> list[str]:
    lines = [ln for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln]
    return sorted({ln for ln in lines if lines.count(ln) > 1})


def test_no_row_twice_when_runs_share_a_work_folder(work):
    # 2x H200, 2026-11-30: a first run that failed its torch parts, then a second in the same
    # folder; run_gpu.sh appends to timing.tsv, and every rank reports correctness
    first = ["build_nccl_tests\t31\t0", "nccl-tests_all_gather\t2\t0",
             "nccl-tests_reduce_scatter\t4\t0", "collectives\t0\t1"]
    second = ["nccl-tests_all_gather\t3\t0", "nccl-tests_reduce_scatter\t4\t0",
              "collectives\t24\t0"]
    (work / "timing.tsv").write_text("\n".join(first + second) + "\n")
    bad = {"name": "nccl.correct", "value": False, "unit": "",
           "labels": {"op": "reduce_scatter", "size_bytes": str(4 << 30), "mode": "in_place",
                      "launch": "eager"}}
    for rank in (0, 1):
        with (work / "coll" / f"collectives.rank{rank}.jsonl").open("a") as f:
            f.write(json.dumps(bad) + "\n")
    md, data = compare.build(work)
    assert _dupes(md) == []
    whats = [r["what"] for r in data["rows"]]
    assert len(whats) == len(set(whats))
    assert sum(w.startswith("WRONG RESULT reduce_scatter") for w in whats) == 1
    # the last run of a part is its row; the earlier one is named beside it
    assert "| nccl-tests_reduce_scatter | 4 | 0 | 4 s rc 0 |" in md
    assert "| collectives | 24 | 0 | 0 s rc 1 |" in md
    assert "| build_nccl_tests | 31 | 0 |  |" in md


def test_a_row_added_twice_is_refused():
    t = compare.Table()
    t.add("all_gather 4 GiB busbw GB/s", "ip 311.2", "nccl-tests ip 325.1", 0.957, ">= 0.98",
          False)
    with pytest.raises(ValueError, match="twice"):
        t.add("all_gather 4 GiB busbw GB/s", "ip 311.2", "nccl-tests ip 325.1", 0.957,
              ">= 0.98", False)


def test_titan_steps_are_counted_once_when_every_rank_logs_them():
    # torchtitan v0.2.2 on 2x H200 (2026-11-30) printed each step's metric line twice
    one = titan_log([3100, 9403, 9436, 9420], 101.2, 55.2).splitlines()
    both = [one[0]] + [ln for ln in one[1:] for _ in (0, 1)]
    s = compare.titan_summary(compare.parse_titan_log("\n".join(both)))
    assert s["steps"] == 4 and s["tps"] == 9420


def _coll_record(op: str, size: int, mode: str, value: float, alloc: str) -> str:
    return json.dumps({"name": "nccl.busbw", "value": value, "unit": "GB/s",
                       "labels": {"op": op, "size_bytes": str(size), "impl": "torch",
                                  "ranks": "2", "mode": mode, "launch": "eager",
                                  "alloc": alloc}}) + "\n"


def test_rounds_compare_medians_and_the_allocator_nccl_tests_uses(tmp_path):
    """Three rounds of each side: the medians are compared, so one slow round on either side
    moves nothing; rackready's buffers from NCCL's allocator are the compared figure."""
    w = tmp_path / "w"
    capture = (CAPTURES / "nccl-tests-all_gather.txt").read_text()
    size = 4 << 30
    # nccl-tests in place at 4 GiB in three rounds: 306.6 (a slow round), 325.1, 324.0
    for r, ip in enumerate(("306.6", "325.1", "324.0"), 1):
        d = w / "nccl-tests" / f"r{r}"
        d.mkdir(parents=True)
        lines = []
        for line in capture.splitlines():
            cells = line.split()
            if cells and cells[0] == str(size):
                cells[-2] = ip  # the in-place busbw column
                line = "  ".join(cells)
            lines.append(line)
        (d / "all_gather.txt").write_text("\n".join(lines) + "\n")
    for r, (nccl_v, torch_v) in enumerate(((322.0, 311.0), (300.0, 310.0), (323.0, 312.0)), 1):
        d = w / "coll" / f"r{r}"
        d.mkdir(parents=True)
        (d / "collectives.rank0.jsonl").write_text(
            _coll_record("all_gather", size, "in_place", nccl_v, "nccl")
            + _coll_record("all_gather", size, "in_place", torch_v, "torch"))
    _, data = compare.build(w)
    row = rows_by_what(data)["all_gather 4 GiB busbw GB/s"]
    assert row["ref_best"] == pytest.approx(324.0) and row["ref_rounds"] == 3
    assert row["ours_best"] == pytest.approx(322.0) and row["alloc"] == "nccl"
    assert row["ratio"] == pytest.approx(322.0 / 324.0) and row["met"] is True
    assert "torch's allocator: ip 311.0" in row["ours"] and "median of 3 rounds" in row["ours"]
