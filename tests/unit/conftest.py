"""Expensive setups built once per test session (once per pytest-xdist worker) and shared.

Each shared thing is built into a tmp_path_factory folder and handed to a test as a copy
(a folder copied into the test's tmp_path, a freshly parsed result), so a test that edits
what it got changes nothing another test sees. The fixtures that hand the copies out live
beside the tests that use them; the builds are here.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The rackready modules these builds call, in one place (the controller's modules are
# moving into subpackages: re-point these lines, nothing else).
from rackready.report.build import build_reports
from rackready.report.cli import main as report_main
from rackready.report.cli import sign_run
from rackready.report.seal.signing import PASSPHRASE_ENV, generate_key

# Test modules share helpers across the package folders (test_report_synthetic's runs,
# test_validation_hwsim's node): every folder is importable, whichever tests were picked.
for _folder in sorted(Path(__file__).parent.iterdir()):
    if _folder.is_dir() and any(_folder.glob("test_*.py")) and str(_folder) not in sys.path:
        sys.path.append(str(_folder))

# --- the healthy hwsim node's hardware checks ------------------------------------------


@dataclass(frozen=True)
class HardwareRun:
    """One real `python -m validation run --only <hardware checks>` on a healthy hwsim
    XE9680 (RoCE) node: what the process said, and where the node and its output are."""

    returncode: int
    stderr: str
    result_text: str  # result.json as the node wrote it
    site: dict[str, Any]
    out: Path  # the run's output folder (artifacts/ beside result.json)

    def result(self) -> dict[str, Any]:
        """A fresh copy of result.json: edit it freely."""
        return json.loads(self.result_text)


@pytest.fixture(scope="session")
def healthy_hardware_run(tmp_path_factory: pytest.TempPathFactory) -> HardwareRun:
    from fault_expectations import HARDWARE_CHECKS
    from hwsim_node import make_node, run_suite
    from test_validation_hwsim import site_for

    tmp = tmp_path_factory.mktemp("hwsim-healthy")
    node = make_node(tmp, "xe9680-h200", "gpu01", "roce")
    compute = [n["bdf"] for n in node.state()["nics"] if n["role"] == "compute"]
    site = site_for(node, "roce", compute)
    proc, _ = run_suite(node, tmp / "out", "xe9680-h200-lab", site, "--only",
                        ",".join(HARDWARE_CHECKS))
    result_path = tmp / "out" / "result.json"
    text = result_path.read_text() if result_path.is_file() else "{}"
    return HardwareRun(proc.returncode, proc.stderr, text, site, tmp / "out")


# --- report folders: built, and signed ------------------------------------------------


def copy_tree(src: Path, dest: Path) -> Path:
    """A test's own copy of a shared folder (modes and bytes as built)."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


@pytest.fixture(scope="session")
def built_report_runs(tmp_path_factory: pytest.TempPathFactory):
    """built(dest, fault_gpu=3): the synthetic run (gpu01 healthy, gpu02 with a slow GPU
    fault_gpu) with its reports built as JSON, HTML and JUnit, copied to dest; each
    fault_gpu is built once."""
    from test_report_synthetic import result, write_run

    masters: dict[int, Path] = {}

    def built(dest: Path, *, fault_gpu: int = 3) -> Path:
        if fault_gpu not in masters:
            run = tmp_path_factory.mktemp(f"built-gpu{fault_gpu}") / "run"
            write_run(run, [result("gpu01"), result("gpu02", fault_gpu=fault_gpu)])
            build_reports(run, {"json", "html", "junit"})
            masters[fault_gpu] = run
        return copy_tree(masters[fault_gpu], dest)

    return built


@dataclass(frozen=True)
class SignedRun:
    """A built run signed by Dana Tech with a key made for it (operator.key, .pub)."""

    folder: Path  # holds run/ and the key pair
    private: Path
    public: Path

    @property
    def run(self) -> Path:
        return self.folder / "run"


@pytest.fixture(scope="session")
def signed_report_run(tmp_path_factory: pytest.TempPathFactory, built_report_runs) -> SignedRun:
    """The built run signed through sign_run (the signed fixture of test_signing)."""
    from datetime import datetime, timezone

    folder = tmp_path_factory.mktemp("signed")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(PASSPHRASE_ENV, raising=False)
        private, public, _ = generate_key(folder / "operator.key")
        report_dir = built_report_runs(folder / "run") / "report"
        sign_run(report_dir, "Dana Tech", private,
                 when=datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc))
    return SignedRun(folder, private, public)


@pytest.fixture(scope="session")
def cli_signed_report_run(tmp_path_factory: pytest.TempPathFactory):
    """The synthetic run built (JSON, HTML) by the report CLI and signed through
    `invoke keygen` and `invoke report --sign` (the signed_run fixture of test_report_cli):
    (folder holding run/ and op.key, the invoke processes' outputs)."""
    from test_report_cli import run_cli
    from test_report_synthetic import healthy_and_faulty

    folder = tmp_path_factory.mktemp("cli-signed")
    run = healthy_and_faulty(folder / "run")
    assert report_main(["build", "--run", str(run), "--formats", "json,html"]) == 0
    key = folder / "op.key"
    keygen = run_cli("keygen", "--out", str(key), module="invoke")
    sign = run_cli("report", "--run", str(run), "--sign", "Dana Tech", "--key", str(key),
                   module="invoke")
    return folder, keygen, sign
