"""`python -m validation` end to end on a fake node: vendor tools are shell scripts that print
the real capture, files come from a generated sysroot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_checks_gpu import FIX, GPU1, SERIAL1, xml_fault

from rackready.site.paths import PROJECT_ROOT
from validation.result_schema import check_result

pytestmark = pytest.mark.integration  # the suite as a real process

REPO = PROJECT_ROOT
# The capture host as it was: 2 GPUs, no ConnectX/NVMe/fabric manager. The GPU workloads
# (torch) have their own tests; here torch on the CPU is not the GPU they need.
# the capture is a 2-GPU VM of an HGX board: its NVSwitches are the host's, not listed here
# (nor DCGM: dcgmi was not installed there)
SCOPE = ["--gpus", "2", "--without",
         "rdma,nvme,raid,nvswitch,fabric-manager,torch,nccl-tests,fio,dcgm"]


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    for name in ("nvidia-smi-q-x.xml", "nvidia-smi-topo-m.txt", "nvidia-smi-nvlink-s.txt",
                 "nvidia-smi-nvlink-e.txt"):
        (data / name).write_text((FIX / name).read_text())
    script = bin_ / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
case "$*" in
  "-q -x") cat {data}/nvidia-smi-q-x.xml;;
  "topo -m") cat {data}/nvidia-smi-topo-m.txt;;
  "nvlink -s") cat {data}/nvidia-smi-nvlink-s.txt;;
  "nvlink -e") cat {data}/nvidia-smi-nvlink-e.txt;;
  *) echo "unsupported: $*" >&2; exit 2;;
esac
""")
    script.chmod(0o755)
    # NCCL as dpkg reports the package named in design.md
    dpkg = bin_ / "dpkg-query"
    dpkg.write_text("#!/bin/sh\nprintf '2.28.9-1+cuda13.0'\n")
    dpkg.chmod(0o755)
    root = tmp_path / "root"
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "var/log").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        (FIX / "proc-driver-nvidia.txt").read_text().split("==")[0])
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz ro iommu=pt\n")
    (root / "proc/modules").write_text("nvidia 1 0 - Live 0x0\n")
    (root / "var/log/kern.log").write_text("")
    return {"bin": bin_, "root": root, "data": data, "out": tmp_path / "run"}


def cli(node: dict[str, Path], *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{node['bin']}:{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "validation", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def run_quick(node, *extra: str) -> subprocess.CompletedProcess:
    return cli(node, "run", "--profile", "xe9680-h200", "--level", "quick",
               "--out", str(node["out"]), "--sysroot", str(node["root"]), *SCOPE, *extra)


def test_healthy_scoped_node_passes_and_streams_events(node):
    proc = run_quick(node)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert lines[0]["event"] == "run_started" and lines[-1] == {**lines[-1], "outcome": "PASS"}
    kinds = {x["event"] for x in lines}
    assert {"check_started", "measurement", "check_finished", "run_finished"} <= kinds
    file_lines = (node["out"] / "events.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in file_lines] == lines
    result = json.loads((node["out"] / "result.json").read_text())
    assert check_result(result) == []
    for key in ("schema_version", "run_id", "node", "hostname", "profile", "level", "simulated",
                "started", "finished", "tool_versions", "bundle_sha256", "inventory", "checks",
                "verdicts", "outcome", "thresholds", "artifacts"):
        assert key in result
    assert result["outcome"] == "PASS" and result["scope"]["gpus"] == 2
    assert result["inventory"]["gpus"]["1"]["serial"] == SERIAL1
    assert "artifacts/nvidia-smi-q-x.xml" in result["artifacts"]
    status = {c["check"]: c["status"] for c in result["checks"]}
    assert status["gpu.inventory"] == "ok" and status["storage.nvme"] == "skipped"
    na = {v["check"] for v in result["verdicts"] if v["outcome"] == "not_applicable"
          and v["metric"] == "check.status"}
    assert "storage.nvme" in na and "network.ports" in na


def test_fault_fails_and_names_gpu(node):
    (node["data"] / "nvidia-smi-q-x.xml").write_text(xml_fault(GPU1, remapped_row_failure="Yes"))
    proc = run_quick(node)
    assert proc.returncode == 1
    result = json.loads((node["out"] / "result.json").read_text())
    assert check_result(result) == []
    bad = [v for v in result["verdicts"] if v["outcome"] == "fail"]
    assert [(v["metric"], v["labels"]["serial"]) for v in bad] == \
        [("gpu.remapped_rows_failure", SERIAL1)]
    assert SERIAL1 in proc.stderr


def test_missing_tool_on_required_check_fails(node):
    (node["bin"] / "nvidia-smi").unlink()
    env_path = f"{node['bin']}:/usr/bin:/bin"  # no real nvidia-smi may leak in from PATH
    proc = subprocess.run([sys.executable, "-m", "validation", "run", "--profile", "xe9680-h200",
                           "--level", "quick", "--out", str(node["out"]), "--sysroot",
                           str(node["root"]), *SCOPE], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PATH": env_path}, timeout=120)
    assert proc.returncode == 1
    result = json.loads((node["out"] / "result.json").read_text())
    assert check_result(result) == []  # error statuses too
    failed = {v["check"] for v in result["verdicts"] if v["metric"] == "check.status"
              and v["outcome"] == "fail"}
    assert {"gpu.inventory", "gpu.health", "nvlink.links"} <= failed


def test_rerun_moves_old_run_aside(node):
    assert run_quick(node).returncode == 0
    first = json.loads((node["out"] / "result.json").read_text())["run_id"]
    assert run_quick(node).returncode == 0
    aside = list(node["out"].parent.glob("run.previous-*"))
    assert len(aside) == 1
    assert json.loads((aside[0] / "result.json").read_text())["run_id"] == first
    assert json.loads((node["out"] / "result.json").read_text())["run_id"] != first


@pytest.mark.parametrize("args,msg", [
    (["--profile", "nope"], "no profile 'nope'"),
    (["--only", "gpu.nothing"], "unknown check"),
    (["--sysroot", "/does/not/exist"], "--sysroot"),
    (["--without", "wings"], "unknown needs"),
])
def test_mistakes_give_one_line_and_exit_2(node, args, msg):
    base = {"--profile": "xe9680-h200", "--level": "quick", "--out": str(node["out"]),
            "--sysroot": str(node["root"])}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    flat = [x for kv in base.items() for x in kv]
    proc = cli(node, "run", *flat)
    assert proc.returncode == 2
    assert msg in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_bad_site_file(node, tmp_path):
    site = tmp_path / "site.yml"
    site.write_text("- not a mapping\n")
    proc = run_quick(node, "--site", str(site))
    assert proc.returncode == 2 and "--site" in proc.stderr and "Traceback" not in proc.stderr


def test_checks_and_profiles_listing(node):
    proc = cli(node, "checks")
    assert proc.returncode == 0
    assert "gpu.health" in proc.stdout and "needs=gpu" in proc.stdout
    proc = cli(node, "profiles")
    assert proc.returncode == 0 and "xe9680-h200-lab" in proc.stdout
    assert "INVALID" not in proc.stdout
