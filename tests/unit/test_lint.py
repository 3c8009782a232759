"""The linters CI holds the tree to (the same commands as `invoke lint`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "cmd",
    [
        [str(BIN / "ruff"), "check", "."],
        [str(BIN / "yamllint"), "-s", "."],
        # production profile, empty skip_list (.ansible-lint)
        [str(BIN / "ansible-lint")],
    ],
    ids=["ruff", "yamllint", "ansible-lint"],
)
def test_linter_passes(cmd):
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(Path.home()), "NO_COLOR": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
