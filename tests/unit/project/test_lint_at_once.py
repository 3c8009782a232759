"""`invoke lint` runs its tools at once, prints each one's output whole in its own order
and names every tool that failed (tasks.py `_all_at_once`, with small stand-in tools)."""

from __future__ import annotations

import importlib.util
import os
import sys

from rackready.site.paths import PROJECT_ROOT

spec = importlib.util.spec_from_file_location("rackready_tasks", PROJECT_ROOT / "tasks.py")
tasks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tasks)


def _tool(body: str) -> list[str]:
    return [sys.executable, "-c", body]


def test_tools_run_at_once_and_print_in_order_naming_the_failed(tmp_path, capfd):
    mine, theirs = tmp_path / "first-started", tmp_path / "second-started"
    # each waits for the other to have started: they end only if they run at the same time
    wait = ("import os, sys, time\nopen({me!r}, 'w').close()\nfor _ in range(100):\n"
            "    if os.path.exists({other!r}): break\n    time.sleep(0.05)\n"
            "else: sys.exit('ran alone')\n")
    first = _tool(wait.format(me=str(mine), other=str(theirs))
                  + "time.sleep(0.3); print('first out')")
    second = _tool(wait.format(me=str(theirs), other=str(mine)) + "print('second out')")
    third = _tool("print('third out'); raise SystemExit(2)")
    failed = tasks._all_at_once([first, second, third], dict(os.environ))
    out = capfd.readouterr().out
    # the third alone: the first two too, had they run one after the other
    assert failed == [os.path.basename(sys.executable)]
    # the first ended last but is printed first, whole, under its own command line
    assert out.index("first out") < out.index("second out") < out.index("third out")
    assert out.count(f"$ {os.path.basename(sys.executable)} -c") == 3


def test_all_passing_tools_name_none(capfd):
    assert tasks._all_at_once([_tool("print('fine')")], dict(os.environ)) == []
    assert "fine" in capfd.readouterr().out


def test_a_tool_that_is_not_installed_fails_in_one_line_and_the_others_run(tmp_path, capfd):
    missing = [str(tmp_path / "ruff"), "check", "."]
    failed = tasks._all_at_once([missing, _tool("print('ran')")], dict(os.environ))
    out = capfd.readouterr().out
    assert failed == ["ruff"]
    assert f"cannot start {missing[0]}: No such file or directory\n" in out and "ran" in out
