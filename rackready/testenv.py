"""What the test suite needs on the controller beyond Python packages."""

from __future__ import annotations

import shutil
from pathlib import Path

from rackready.lab.shell import ensure_host_packages, run


def ensure_test_packages() -> None:
    """Lab packages, plus Debian's Chromium (browser test, PDF) and a font for it."""
    ensure_host_packages()
    missing = []
    if not shutil.which("chromium"):
        missing.append("chromium")
    if not Path("/usr/share/fonts/truetype/dejavu").exists():
        missing.append("fonts-dejavu-core")
    if missing:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update", "-qq"], env=env, timeout=900)
        run(["apt-get", "install", "-y", "-qq", *missing], env=env, timeout=1800)
