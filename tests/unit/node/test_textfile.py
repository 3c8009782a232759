"""node_exporter textfile metrics (validation/textfile.py), checked by `promtool check
metrics` (Debian's `prometheus` package; `invoke test` installs it through
rackready_lab.testenv.TEST_TOOLS). A missing promtool fails these tests: they are the only
check that the files would be read by Prometheus at all."""

from __future__ import annotations

import gzip
import itertools
import json
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hwsim_node import REPO, make_node, run_suite

from validation import metrics, textfile

SAMPLE_LABELS = {"gpu": "3", "serial": "1653017366059", "bus_id": "0000:5d:00.0"}


def promtool(text: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool not installed: Debian package 'prometheus' "
                    "(`invoke test` installs it: rackready_lab.testenv.TEST_TOOLS)")
    return subprocess.run([tool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60, check=False)


def assert_clean(text: str) -> None:
    proc = promtool(text)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[:3000]


def doc_with(measurements: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"profile": "xe9680-h200", "level": "quick", "node": "gpu01", "simulated": False,
            "run_id": "r-1", "inventory": {"gpu_driver_version": "580.159.04"},
            "checks": [{"check": "synthetic", "status": "ok", "duration_s": 0.5,
                        "measurements": measurements}],
            "verdicts": [], **extra}


def test_every_registered_metric_makes_a_clean_name() -> None:
    numeric = [{"name": m.name, "value": 1.5, "unit": m.unit, "labels": SAMPLE_LABELS}
               for m in metrics.METRICS.values()]
    text_values = [{"name": m.name, "value": "some text", "unit": m.unit,
                    "labels": SAMPLE_LABELS} for m in metrics.METRICS.values()]
    text = textfile.run_exposition(doc_with(numeric + text_values), 12.0, 1.7e9)
    assert_clean(text)
    names = {textfile.metric_name(m.name, m.unit)[0] for m in metrics.METRICS.values()}
    assert len(names) == len(metrics.METRICS)  # no two suite metrics share a series


@pytest.mark.parametrize("name,unit,prom,factor", [
    ("gpu.temperature", "C", "rackready_gpu_temperature_celsius", 1.0),
    ("gpu.idle_power_dev_w", "W", "rackready_gpu_idle_power_dev_watts", 1.0),
    ("gpu.memory_total", "MiB", "rackready_gpu_memory_total_bytes", 2.0 ** 20),
    ("host.dimm_size_gib", "GiB", "rackready_host_dimm_size_bytes", 2.0 ** 30),
    ("nccl.busbw", "GB/s", "rackready_nccl_busbw_bytes_per_second", 1e9),
    ("ib.rate", "Gb/s", "rackready_ib_rate_bytes_per_second", 1.25e8),
    ("gemm.tflops", "TFLOP/s", "rackready_gemm_flops_per_second", 1e12),
    ("bmc.power_on_hours", "h", "rackready_bmc_power_on_seconds", 3600.0),
    ("nvme.percentage_used", "%", "rackready_nvme_endurance_used_ratio", 0.01),
    ("gpu.count", "", "rackready_gpus", 1.0),
    ("fsdp.step_time_s", "s", "rackready_fsdp_step_time_seconds", 1.0),
])
def test_names_are_in_base_units(name: str, unit: str, prom: str, factor: float) -> None:
    assert textfile.metric_name(name, unit) == (prom, factor)


def test_label_values_are_escaped() -> None:
    nasty = 'a "quoted" back\\slash\nnew line'
    meas = [{"name": "gpu.temperature", "value": 41, "unit": "C",
             "labels": {"gpu": "0", "serial": nasty, "9bad-key": "x", "source": "mine"}}]
    text = textfile.health_exposition(doc_with(meas), 1.0, 1.7e9, "unhealthy")
    assert_clean(text)
    line = next(x for x in text.splitlines() if x.startswith("rackready_gpu_temperature"))
    assert 'serial="a \\"quoted\\" back\\\\slash\\nnew line"' in line
    # a measurement's own "source" label never hides ours; a bad key is made a name
    assert 'source="health"' in line and 'm_source="mine"' in line and 'l_9bad_key="x"' in line


def series(text: str) -> list[str]:
    return [x for x in text.splitlines() if x and not x.startswith("#")]


FAILING = [
    {"check": "gpu.health", "metric": "gpu.ecc_uncorrected_volatile", "outcome": "fail",
     "labels": SAMPLE_LABELS, "component": "GPU 3 (serial 1653017366059, PCI 0000:5d:00.0)"},
    {"check": "gpu.health", "metric": "gpu.ecc_uncorrected_volatile", "outcome": "pass",
     "labels": {"gpu": "0", "serial": "1"}, "component": "GPU 0 (serial 1)"},
    {"check": "kernel.cmdline", "metric": "check.status", "outcome": "not_applicable",
     "labels": {}, "component": "node"},
]


def test_the_node_exports_no_verdict_of_its_own() -> None:
    """A run's file holds what was measured and how each check ended; the node's own
    judgement (its outcome, its verdicts) is never a metric: rackready_ok is the
    controller's alone, and the health gate says its state under its own name."""
    doc = doc_with([{"name": "gpu.temperature", "value": 41, "unit": "C",
                     "labels": {"gpu": "0"}}], verdicts=FAILING, outcome="PASS")
    for text in (textfile.run_exposition(doc, 33.0, 1.7e9),
                 textfile.health_exposition(doc, 1.0, 1.7e9, "healthy")):
        assert_clean(text)
        for judged in ("rackready_ok", "rackready_check_ok", "rackready_verdicts",
                       "rackready_outcome"):
            assert not re.search(rf"^{judged}\{{", text, re.M), judged
        assert "outcome=" not in text and "judged_by" not in text
    health = textfile.health_exposition(doc, 1.0, 1.7e9, "timed_out")
    assert [x for x in series(health) if x.startswith("rackready_health_state")] == [
        'rackready_health_state{source="health",state="healthy"} 0',
        'rackready_health_state{source="health",state="unhealthy"} 0',
        'rackready_health_state{source="health",state="timed_out"} 1']


def test_a_check_status_is_one_series_per_state() -> None:
    doc = doc_with([])
    doc["checks"].append({"check": "gpu.xid", "status": "timeout", "duration_s": 2.0,
                          "measurements": []})
    text = textfile.run_exposition(doc, 33.0, 1.7e9)
    assert_clean(text)
    status = [x for x in series(text) if x.startswith('rackready_check_status{source="run",'
                                                      'check="gpu.xid"')]
    assert status == [f'rackready_check_status{{source="run",check="gpu.xid",status="{s}"}} '
                      f'{int(s == "timeout")}' for s in ("ok", "skipped", "error", "timeout")]
    assert 'rackready_run_duration_seconds{source="run"} 33' in text
    assert 'rackready_run_timestamp_seconds{source="run"} 1700000000' in text


def test_info_labels_stay_the_same_from_run_to_run() -> None:
    def info(**run: Any) -> str:
        text = textfile.run_exposition(doc_with([], **run), 1.0, 1.7e9)
        return next(x for x in series(text) if x.startswith("rackready_info{"))

    first = info(run_id="r-1", bundle_sha256="a" * 64, outcome="PASS", nonce="n1")
    again = info(run_id="r-2", bundle_sha256="b" * 64, outcome="FAIL", nonce="n2")
    assert first == again
    assert first == ('rackready_info{source="run",profile="xe9680-h200",level="quick",'
                     'node="gpu01",simulated="false",nvidia_driver="580.159.04"} 1')


def test_the_controller_file_carries_its_decision() -> None:
    text = textfile.controller_exposition(
        node="gpu01", profile="xe9680-h200", level="standard", simulated=False,
        outcome="FAIL", verdicts=FAILING, judged_unix=1.7e9)
    assert_clean(text)
    assert 'rackready_ok{source="controller"} 0' in text
    assert 'rackready_outcome{source="controller",outcome="FAIL"} 1' in text
    assert 'rackready_outcome{source="controller",outcome="PASS"} 0' in text
    assert ('rackready_check_ok{source="controller",check="gpu.health",'
            'component="GPU 3 (serial 1653017366059, PCI 0000:5d:00.0)"} 0') in text
    assert ('rackready_check_ok{source="controller",check="gpu.health",'
            'component="GPU 0 (serial 1)"} 1') in text
    assert 'rackready_verdicts{source="controller",outcome="fail"} 1' in text
    # 11 + P: info, ok, timestamp, 4 outcomes, 4 verdict outcomes; P parts judged
    assert len(series(text)) == 11 + 2
    passed = textfile.controller_exposition(
        node="gpu01", profile="xe9680-h200", level="standard", simulated=False,
        outcome="PASS", verdicts=[], judged_unix=1.7e9)
    assert 'rackready_ok{source="controller"} 1' in passed
    # the files share their HELP lines (node_exporter refuses a family helped two ways)
    run = textfile.run_exposition(doc_with([]), 1.0, 1.7e9)
    helps = {x for x in text.splitlines() if x.startswith("# HELP")}
    assert {x for x in run.splitlines() if x.startswith("# HELP rackready_info ")} <= helps


FIXTURE = REPO / "tests" / "fixtures" / "h200x2-quick-result.json.gz"


def _spread(labels: dict[str, str], gpus: int) -> list[dict[str, str]]:
    """One measurement's labels over an 8-GPU node: each GPU, each ordered GPU pair, each
    NVLink pair, as a real 8-GPU result names them."""
    out = [dict(labels)]
    if "gpu" in labels:
        out = [{**x, "gpu": str(g), **{k: f"{v}-{g}" for k, v in x.items()
                                       if k in ("serial", "bus_id", "rank")}}
               for x in out for g in range(gpus)]
    if "src" in labels:
        out = [{**x, "src": str(a), "dst": str(b)} for x in out
               for a, b in itertools.permutations(range(gpus), 2)]
    if "pair" in labels:
        out = [{**x, "pair": f"{a}-{b}"} for x in out
               for a, b in itertools.combinations(range(gpus), 2)]
    return [{**x, **{k: str(gpus) for k in ("ranks", "world") if k in x}} for x in out]


def eight_gpu_burnin(intervals: int, steps: int) -> dict[str, Any]:
    """A real 2x H200 result (tests/fixtures/h200x2-quick-result.json.gz) as an 8-GPU node's
    burn-in: every GPU, GPU pair and NVLink pair, `intervals` burn-in points per GPU, dtype
    and reading (a 4-hour burn-in: 600, gemm_burnin.SERIES_POINTS) and `steps` training
    steps (the burn-in's reference job: 300)."""
    doc = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    doc["level"] = "burnin"
    for c in doc["checks"]:
        seen: dict[str, dict[str, Any]] = {}
        for m in c["measurements"]:  # one of each, its GPUs and points made anew below
            labels = m.get("labels") or {}
            key = json.dumps([m["name"], {k: v for k, v in labels.items() if k not in (
                "t_s", "step", "gpu", "serial", "bus_id", "rank", "src", "dst", "pair")}],
                sort_keys=True)
            seen.setdefault(key, m)
        out = []
        for m in seen.values():
            labels = m.get("labels") or {}
            points = ([("t_s", f"{24.0 * i:.2f}") for i in range(intervals)] if "t_s" in labels
                      else [("step", str(i + 1)) for i in range(steps)] if "step" in labels
                      else [None])
            out += [{**m, "labels": {**spread, **dict([p] if p else [])}}
                    for spread in _spread(labels, 8) for p in points]
        c["measurements"] = out
    return doc


def test_the_series_of_an_8_gpu_burn_in_are_bounded() -> None:
    """The formula of validation/textfile.py's docstring on an 8-GPU burn-in: 3 + 5 C + M
    for the run's file, M set by the node's parts and not by the run's length (a 4-hour
    burn-in's 600 points per curve are not series)."""
    long = eight_gpu_burnin(intervals=600, steps=300)
    short = eight_gpu_burnin(intervals=10, steps=16)
    points = sum(1 for c in long["checks"] for m in c["measurements"]
                 if {"t_s", "step"} & set(m["labels"]))
    assert points > 30_000  # what the old textfile made a series each
    checks = len(long["checks"])
    parts = {(m["name"], json.dumps(m["labels"], sort_keys=True))
             for c in long["checks"] for m in c["measurements"]
             if not {"t_s", "step"} & set(m["labels"])}
    text = textfile.run_exposition(long, 14_400.0, 1.7e9)
    assert_clean(text)
    assert len(series(text)) == 3 + 5 * checks + len(parts)
    assert len(series(text)) == len(series(textfile.run_exposition(short, 60.0, 1.7e9)))
    # this node: 27 checks, 1,596 measured series (7 NVLink counters x 144 links alone),
    # 1,734 in all, where the old file had one more per point: 40,000 and more
    assert len(series(text)) < 2_000, len(series(text))
    health = textfile.health_exposition(long, 2.0, 1.7e9, "healthy")
    assert len(series(health)) == 6 + 5 * checks + len(parts)


def test_the_file_is_replaced_atomically(tmp_path: Path) -> None:
    target = textfile.write(tmp_path, "run", "# first\n")
    assert target == tmp_path / "rackready-run.prom"
    inode = target.stat().st_ino
    textfile.write(tmp_path, "run", "# second\n")
    assert target.read_text() == "# second\n" and target.stat().st_ino != inode  # renamed
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rackready-run.prom"]


def test_where_a_run_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(textfile.ENV_DIR, raising=False)
    assert textfile.run_dir({}) is None
    monkeypatch.setenv(textfile.ENV_DIR, str(tmp_path / "env"))
    assert textfile.run_dir({}) == tmp_path / "env"
    site = {"metrics": {"textfile_dir": str(tmp_path / "site")}}
    assert textfile.run_dir(site) == tmp_path / "site"
    assert textfile.site_dir(site) == str(tmp_path / "site")  # what the controller reads
    assert textfile.site_dir({"metrics": {}}) is None
    assert textfile.run_dir(site, str(tmp_path / "flag")) == tmp_path / "flag"


def test_an_unwritable_directory_never_fails_the_run(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert textfile.write_run(doc_with([]), blocker / "sub") is None
    assert "metrics not written" in capsys.readouterr().err


def test_a_run_writes_its_textfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_validation_hwsim import site_for

    node = make_node(tmp_path, "xe9680-h200", "gpu01", "roce")
    compute = [n["bdf"] for n in node.state()["nics"] if n["role"] == "compute"]
    site = {**site_for(node, "roce", compute), "metrics": {"textfile_dir": str(tmp_path / "tf")}}
    env_dir = tmp_path / "env-dir"
    monkeypatch.setenv(textfile.ENV_DIR, str(env_dir))  # the site's setting wins over it
    proc, result = run_suite(node, tmp_path / "out", "xe9680-h200-lab", site, "--only",
                             "gpu.inventory,gpu.health,nvlink.links,network.ports")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "tf" / "rackready-run.prom").read_text()
    assert not env_dir.exists()
    assert_clean(text)
    assert result["outcome"] == "PASS" and "rackready_ok" not in text  # the node's own word
    assert result["run_id"] not in text
    assert 'rackready_gpu_temperature_celsius{source="run",check="gpu.health",gpu="0"' in text
    assert text.count("rackready_check_status{") == 4 * 4  # one per check and status
    # the same families as the health check's file, with the same help
    helps = [x for x in text.splitlines() if x.startswith("# HELP rackready_check_status ")]
    health_text = textfile.health_exposition(doc_with([]), 1.0, 1.7e9, "healthy")
    assert helps and helps[0] in health_text.splitlines()
