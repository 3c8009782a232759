"""bench/walltime.py: the per-check wall-time table of a real result.json (2x H200, quick)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from rackready.site.paths import PROJECT_ROOT

REPO = PROJECT_ROOT
FIXTURE = REPO / "tests" / "fixtures" / "h200x2-quick-result.json.gz"
spec = importlib.util.spec_from_file_location("walltime", REPO / "bench" / "walltime.py")
walltime = importlib.util.module_from_spec(spec)
spec.loader.exec_module(walltime)

from validation import budgets  # noqa: E402  (walltime put the repository on sys.path)


def test_table_of_the_real_quick_run():
    result = walltime.load(FIXTURE)
    text = walltime.table(result)
    lines = text.splitlines()
    assert lines[0].startswith("Wall time of ") and "on 2 GPUs" in lines[0]
    # 03:08:55.702 -> 03:12:05.148: the run took 189.4 s against a 90 s budget
    assert "189.4 s (budget 90 s)" in lines[0]
    body = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| check")]
    # the slowest first: fsdp_reference 68.0 s, then the burn-in 67.3 s, each over its share
    # (the shares come from validation/budgets.yml, which the measurements keep moving)
    fsdp, gemm = (budgets.share_s("quick", c, 2) for c in ("fsdp_reference", "gemm_burnin"))
    assert body[1].startswith(f"| fsdp_reference | ok | 68.0 | {fsdp:g} | +{68.0 - fsdp:.1f} |")
    assert body[2].startswith(f"| gemm_burnin | ok | 67.3 | {gemm:g} | +{67.3 - gemm:.1f} |")
    assert any(ln.startswith("share: ") for ln in lines[:4])  # the column is explained
    checks = {ln.split(" | ")[0][2:] for ln in body}
    assert {c["check"] for c in result["checks"]} <= checks
    assert lines[-1].startswith("| **total** | | **189.4** | 90 | +99.4 |")


def test_cli_and_a_bad_file(tmp_path):
    ok = subprocess.run([sys.executable, str(REPO / "bench" / "walltime.py"), str(FIXTURE),
                         "--gpus", "8"], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "on 8 GPUs" in ok.stdout and "budget 120 s" in ok.stdout
    bad = tmp_path / "r.json"
    bad.write_text("{")
    err = subprocess.run([sys.executable, str(REPO / "bench" / "walltime.py"), str(bad)],
                         capture_output=True, text=True, check=False)
    assert err.returncode == 2 and err.stderr.startswith("error:")
    assert len(err.stderr.splitlines()) == 1
