"""The controller's Debian packages beyond Python: what `invoke demo` and `invoke test` need.

One list and one apt-get transaction for both: the lab's packages
(rackready_lab.shell.HOST_PACKAGES) plus Chromium and a font for the PDF reports
and the browser test.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rackready.report.render.pdf import find_chromium
from rackready_lab.shell import apt_install, missing_host_packages

# the report stylesheet's first font; without any font Chromium prints empty boxes
FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")


def missing_report_packages() -> list[str]:
    """Debian packages the PDF reports (and the browser test) lack on this controller."""
    missing = []
    if not find_chromium():
        missing.append("chromium")
    if not FONT_DIR.is_dir():
        missing.append("fonts-dejavu-core")
    return missing


def missing_controller_packages() -> list[str]:
    return sorted(set(missing_host_packages()) | set(missing_report_packages()))


def ensure_controller_packages() -> list[str]:
    """apt-get install what the lab, the PDF and the browser test need; returns what was
    installed. Raises EnvironmentProblem (one line) when it cannot."""
    return apt_install(missing_controller_packages())


# What only the test suite needs (the tools a test runs for real, so that no test skips
# on a fresh machine): the RAID guard's images (pvcreate, mkfs.xfs) and the PDF page
# checks (pdfinfo, pdftotext), the textfile metrics' check (promtool, in Debian's prometheus).
TEST_TOOLS = {"pvcreate": "lvm2", "mkfs.xfs": "xfsprogs", "pdfinfo": "poppler-utils",
              "promtool": "prometheus"}


def ensure_test_packages() -> list[str]:
    """The controller's packages plus the test suite's own tools (`invoke test`), in one
    apt-get transaction."""
    tools = {pkg for tool, pkg in TEST_TOOLS.items() if shutil.which(tool) is None}
    return apt_install(sorted(set(missing_controller_packages()) | tools))
