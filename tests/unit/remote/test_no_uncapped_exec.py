"""No uncapped SSH command on the controller: every remote command's stdout and stderr are
drained together, capped and under a deadline (rackready.remote.runner.pump).

A command read one stream at a time hangs both sides once the node fills the other
stream's window, and one read whole holds whatever the node sends in memory. The scan
finds every exec on an SSH channel in the controller's code; only the pumped helpers
below may start one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from rackready.remote import ssh
from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
# paramiko's ways to start a remote process on a channel or client
EXEC = {"exec_command", "invoke_shell", "invoke_subsystem"}
# (file, function) that may start one: each hands the channel to pump at once
CAPPED = {
    ("rackready/remote/runner.py", "run_command"),  # any bounded command (CommandResult)
    ("rackready/remote/shell.py", "NodeShell.open_channel"),  # the suite; exec; Slurm's srun
}


def exec_calls(source: str) -> list[tuple[str, int]]:
    """(qualified enclosing function, line) of every call of an EXEC method."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(child, [*scope, child.name])
                continue
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                    and child.func.attr in EXEC):
                found.append((".".join(scope) or "<module>", child.lineno))
            walk(child, scope)

    walk(ast.parse(source), [])
    return found


def _controller_files() -> list[Path]:
    return [*sorted((ROOT / "rackready").rglob("*.py")),
            *sorted((ROOT / "rackready_lab").rglob("*.py")), ROOT / "tasks.py"]


def test_only_the_pumped_helpers_start_a_remote_command():
    uncapped = []
    seen = set()
    for path in _controller_files():
        rel = str(path.relative_to(ROOT))
        for where, line in exec_calls(path.read_text()):
            if (rel, where) in CAPPED:
                seen.add((rel, where))
            else:
                uncapped.append(f"{rel}:{line} in {where}")
    assert uncapped == [], ("remote commands outside rackready.remote.runner.run_command "
                            f"(stdout and stderr drained together, capped): {uncapped}")
    assert seen == CAPPED, f"an allowed helper moved: update CAPPED ({CAPPED - seen})"


def test_each_allowed_helper_pumps_what_it_starts():
    for rel, qualname in CAPPED:
        tree = ast.parse((ROOT / rel).read_text())
        node: ast.AST = tree
        for part in qualname.split("."):
            node = next(n for n in ast.iter_child_nodes(node)
                        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
        calls = {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
                 for n in ast.walk(node) if isinstance(n, ast.Call)}
        if rel.endswith("runner.py"):
            assert "pump" in calls, qualname
        else:  # the shell's channel opener: every caller of it pumps that channel
            for path in _controller_files():
                text = path.read_text()
                opened = len(re.findall(r"= self\.(?:shell\.)?open_channel\(", text))
                assert opened <= len(re.findall(r"\bpump\(channel", text)), path


def test_the_uncapped_reader_is_gone():
    assert not hasattr(ssh, "run")


def test_the_scan_catches_a_new_uncapped_call():
    source = (
        "def run(client, cmd):\n"
        "    _, out, err = client.exec_command(cmd)\n"
        "    return out.read(), err.read()\n"
        "class Host:\n"
        "    def shell(self):\n"
        "        return self.client.invoke_shell()\n"
    )
    assert exec_calls(source) == [("run", 2), ("Host.shell", 6)]
    assert exec_calls("def f(c):\n    return c.get_transport()\n") == []
