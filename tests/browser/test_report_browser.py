"""The HTML report in headless Chromium: it renders, logs nothing to the console,
and a screenshot is kept as a CI artifact (RACKREADY_ARTIFACTS or ./artifacts).

Chromium runs twice per page with only command-line flags (no extra Python
package, no debugging port): --dump-dom with --enable-logging=stderr gives the
rendered DOM and every console message (logged as "CONSOLE" lines), and
--screenshot gives the PNG. The report has no JavaScript, so any console line
(an error, a failed resource load) fails the test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_report_synthetic import healthy_and_faulty  # noqa: E402

from rackready.report.build import build_reports  # noqa: E402
from rackready.report.pdf import chromium_command, find_chromium  # noqa: E402

pytestmark = pytest.mark.browser

CONSOLE = re.compile(r":CONSOLE[^\]]*\] (.*)")


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    binary = find_chromium()
    if not binary:
        pytest.skip("chromium not installed (Debian package 'chromium')")
    with tempfile.TemporaryDirectory(prefix="rackready-browser-") as profile:
        return subprocess.run(chromium_command(binary, profile, "--hide-scrollbars", *args),
                              capture_output=True, text=True, timeout=120, check=False)


def render(url: str) -> tuple[str, list[str]]:
    """The DOM after load and the console messages the page produced."""
    proc = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", url)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, CONSOLE.findall(proc.stderr)


def screenshot(url: str, out: Path, height: int = 3800) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = chromium(f"--window-size=1100,{height}", f"--screenshot={out.resolve()}", url)
    assert proc.returncode == 0 and out.is_file(), proc.stderr[-2000:]
    return out


def artifacts_dir() -> Path:
    return Path(os.environ.get("RACKREADY_ARTIFACTS", "artifacts"))


def test_console_capture_sees_errors(tmp_path: Path) -> None:
    # The no-console-errors assertion below only means something if errors are seen.
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>console.error('boom'); undefinedFn();</script>"
                    "<img src='missing.png'></body></html>")
    _, console = render(page.as_uri())
    assert any("boom" in c for c in console)
    assert any("undefinedFn" in c for c in console)


def test_report_renders_without_console_errors(tmp_path: Path) -> None:
    run = healthy_and_faulty(tmp_path / "run")
    build_reports(run, {"json", "html"})
    node = (run / "report" / "node-gpu02.html").as_uri()
    dom, console = render(node)
    assert console == []
    assert "<title>SIMULATED — FAIL · node gpu02" in dom
    verdict = re.search(r'id="verdict">(.*?)</div>', dom, re.S).group(1)
    assert re.findall(r">([A-Z]+)<", verdict) == ["FAIL", "SIMULATED"]
    assert 'class="sim-banner"' in dom and "GPU 3 (serial 1653124042737)" in dom
    assert dom.count('class="chart"') == 6
    shot = screenshot(node, artifacts_dir() / "report-screenshot.png")
    assert shot.read_bytes().startswith(b"\x89PNG")

    rack = (run / "report" / "rack.html").as_uri()
    dom, console = render(rack)
    assert console == []
    assert 'href="node-gpu01.html"' in dom and "SIMULATED" in dom
    screenshot(rack, artifacts_dir() / "rack-screenshot.png", height=1400)
