"""node_exporter textfile metrics (validation/textfile.py), checked by `promtool check
metrics` (Debian's `prometheus` package; `invoke test` installs it through
rackready.lab.testenv.TEST_TOOLS). A missing promtool fails these tests: they are the only
check that the files would be read by Prometheus at all."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hwsim_node import make_node, run_suite

from validation import metrics, textfile

SAMPLE_LABELS = {"gpu": "3", "serial": "1653017366059", "bus_id": "0000:5d:00.0"}


def promtool(text: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool not installed: Debian package 'prometheus' "
                    "(`invoke test` installs it: rackready.lab.testenv.TEST_TOOLS)")
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
    text = textfile.exposition("run", doc_with(numeric + text_values), 12.0, 1.7e9, True,
                               "PASS")
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
    text = textfile.exposition("health", doc_with(meas), 1.0, 1.7e9, False, "unhealthy")
    assert_clean(text)
    line = next(x for x in text.splitlines() if x.startswith("rackready_gpu_temperature"))
    assert 'serial="a \\"quoted\\" back\\\\slash\\nnew line"' in line
    # a measurement's own "source" label never hides ours; a bad key is made a name
    assert 'source="health"' in line and 'm_source="mine"' in line and 'l_9bad_key="x"' in line


def test_outcomes_per_check_and_component_and_the_run() -> None:
    verdicts = [
        {"check": "gpu.health", "metric": "gpu.ecc_uncorrected_volatile", "outcome": "fail",
         "labels": SAMPLE_LABELS},
        {"check": "gpu.health", "metric": "gpu.ecc_uncorrected_volatile", "outcome": "pass",
         "labels": {"gpu": "0", "serial": "1"}},
        {"check": "kernel.cmdline", "metric": "check.status", "outcome": "not_applicable",
         "labels": {}},
    ]
    doc = doc_with([], verdicts=verdicts)
    doc["checks"].append({"check": "gpu.xid", "status": "timeout", "duration_s": 2.0,
                          "measurements": []})
    text = textfile.exposition("run", doc, 33.0, 1.7e9, False, "FAIL")
    assert_clean(text)
    assert ('rackready_check_ok{source="run",check="gpu.health",'
            'component="GPU 3 (serial 1653017366059, PCI 0000:5d:00.0)"} 0') in text
    assert ('rackready_check_ok{source="run",check="gpu.health",'
            'component="GPU 0 (serial 1)"} 1') in text
    assert 'rackready_check_status{source="run",check="gpu.xid",status="timeout"} 1' in text
    assert 'rackready_verdicts{source="run",outcome="fail"} 1' in text
    assert 'rackready_ok{source="run"} 0' in text
    assert 'rackready_run_duration_seconds{source="run"} 33' in text
    assert 'rackready_run_timestamp_seconds{source="run"} 1700000000' in text
    assert 'outcome="FAIL"' in text and 'nvidia_driver="580.159.04"' in text


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
    assert 'rackready_ok{source="run"} 1' in text
    assert f'run_id="{result["run_id"]}"' in text
    assert 'rackready_gpu_temperature_celsius{source="run",check="gpu.health",gpu="0"' in text
    assert 'rackready_check_ok{source="run",check="nvlink.links",component="GPU 7' in text
    assert text.count("rackready_check_status{") == 4
    # the same families as the health check's file, with the same help
    helps = [x for x in text.splitlines() if x.startswith("# HELP rackready_check_ok ")]
    health_text = textfile.exposition("health", doc_with([]), 1.0, 1.7e9, True, "healthy")
    assert helps and helps[0] in health_text.splitlines()
