"""`invoke test` runs the lab tier beside the other tiers, keeps each tier's exit code and
prints every tier's output whole.

tasks.py's own code runs here with each tier's pytest replaced by a small command: the
lab tier's stand-in waits for a file the integration tier's stand-in writes, so it can only
end when the two run at the same time.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass

import pytest
from invoke import Exit

from rackready.site.paths import PROJECT_ROOT

spec = importlib.util.spec_from_file_location("rackready_tasks", PROJECT_ROOT / "tasks.py")
tasks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tasks)


@dataclass
class Ran:
    exited: int


class Context:
    """invoke's Context, as far as `invoke test` uses it: run a shell command."""

    def run(self, cmd, **_):
        return Ran(subprocess.run(cmd, shell=True).returncode)


def _stand_ins(tmp_path, monkeypatch, codes: dict[str, int]) -> list[str]:
    """Each tier's pytest becomes a command that prints its name and exits with its code;
    lint becomes a call that passes or fails. The list records the tiers as they start."""
    started: list[str] = []
    met = tmp_path / "integration-ran"

    def args(tier, k):
        started.append(tier)
        body = f"print('output of the {tier} tier')"
        if tier == "integration":
            body += f"; open({str(met)!r}, 'w').close()"
        if tier == "lab":  # ends only once the integration tier has run beside it
            body = ("import os, time\nfor _ in range(200):\n"
                    f"    if os.path.exists({str(met)!r}): break\n    time.sleep(0.05)\n"
                    f"else: raise SystemExit('the lab tier ran alone')\n{body}")
        return [sys.executable, "-c", f"{body}\nraise SystemExit({codes.get(tier, 0)})"]

    def lint(c):
        started.append("lint")
        if codes.get("lint"):
            raise Exit("lint failed: ruff", code=codes["lint"])

    monkeypatch.setattr(tasks, "_pytest_args", args)
    monkeypatch.setattr(tasks, "lint", lint)
    monkeypatch.setattr(tasks, "_xdist_workers", lambda tier: 0)
    monkeypatch.setattr(tasks.os, "nice", lambda n: started.append(f"nice {n}"))
    monkeypatch.setattr("rackready.lab.testenv.ensure_test_packages", lambda: [])
    monkeypatch.setenv("RACKREADY_ARTIFACTS", str(tmp_path / "artifacts"))
    return started


def test_the_lab_tier_runs_beside_the_others_and_its_output_is_printed_whole(
        tmp_path, monkeypatch, capfd):
    started = _stand_ins(tmp_path, monkeypatch, {})
    tasks.test.body(Context())
    out = capfd.readouterr().out
    # the unit tier alone, then the lab tier, then the others at a lower priority
    assert started == ["unit", "lab", "nice 10", "integration", "browser", "lint"]
    log = tmp_path / "artifacts" / "test-lab.log"
    assert log.read_text() == "output of the lab tier\n"
    lines = out.splitlines()
    # its output whole, after the other tiers, then its wall time, then the summary
    assert lines.index("output of the lab tier") > lines.index(
        next(ln for ln in lines if ln.startswith("test: tier lint ")))
    assert lines[lines.index("output of the lab tier") + 1].startswith("test: tier lab ")
    assert lines[-1].startswith("test: unit passed (") and "lab passed" in lines[-1]
    assert "whole suite" in lines[-1] and "the lab tier beside the others" in lines[-1]


@pytest.mark.parametrize(("codes", "expected"), [
    ({"lab": 1}, 1),                   # a failed lab tier fails the suite
    ({"lab": 1, "unit": 3}, 3),        # the first failed tier in the tiers' order
    ({"lint": 1, "lab": 4}, 4),
])
def test_the_exit_code_is_the_first_failed_tiers_in_order(tmp_path, monkeypatch, capfd,
                                                          codes, expected):
    _stand_ins(tmp_path, monkeypatch, codes)
    with pytest.raises(Exit) as raised:
        tasks.test.body(Context())
    assert raised.value.code == expected
    out = capfd.readouterr().out
    assert "test: tier lab " in out and f"FAILED (exit {codes['lab']})" in out


def test_the_lab_tier_alone_runs_in_the_foreground(tmp_path, monkeypatch, capfd):
    started = _stand_ins(tmp_path, monkeypatch, {})
    monkeypatch.setattr(tasks, "_pytest_args", lambda tier, k: (
        started.append(tier), [sys.executable, "-c", "print('lab alone')"])[1])
    tasks.test.body(Context(), lab=True)
    assert started == ["lab"]  # no lower priority, no log file
    assert not (tmp_path / "artifacts" / "test-lab.log").exists()
    assert "lab alone" in capfd.readouterr().out
