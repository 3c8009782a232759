"""The HTML report in headless Chromium: it renders, logs nothing to the console, nothing
overflows the page width on screen (1280 px) or in print, and screenshots are kept as CI
artifacts (RACKREADY_ARTIFACTS or ./artifacts).

Two ways of driving Chromium, both without extra Python packages:
- command-line flags: --dump-dom with --enable-logging=stderr gives the rendered DOM and every
  console message ("CONSOLE" lines); --screenshot gives a PNG. The report has no
  JavaScript, so any console line (an error, a failed resource load) fails the test.
- the overflow measurement: a copy of the page with a script appended that measures every
  element and writes its findings into the DOM, read back with --dump-dom at the screen
  width (1280 px) and, with the page's print rules applied, at the printable A4 width.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "decide"))
from test_report_synthetic import healthy_and_faulty  # noqa: E402

from rackready.report.build import build_reports  # noqa: E402
from rackready.report.render.pdf import chromium_command, find_chromium  # noqa: E402

pytestmark = pytest.mark.browser

CONSOLE = re.compile(r":CONSOLE[^\]]*\] (.*)")
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "h200x2-quick-result.json.gz"
SCREEN_PX = 1280
# A4 less the report's 12 mm side margins (report.css @page), in CSS px (96 per inch).
PRINT_PX = round((210 - 2 * 12) / 25.4 * 96)

# Every element whose box reaches past the page's main column, or whose content is wider
# than its box; every SVG text (a plot label) that leaves its plot.
OVERFLOW_JS = r"""
(() => {
  const out = [];
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : '');
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1)
    out.push(`page scrolls sideways: ${root.scrollWidth} > ${root.clientWidth}`);
  const main = document.querySelector('main').getBoundingClientRect();
  for (const el of document.querySelectorAll('main *')) {
    if (getComputedStyle(el).display === 'none') continue;
    const r = el.getBoundingClientRect();
    if (!r.width && !r.height) continue;
    const svg = el.closest('svg');
    if (svg && el.tagName.toLowerCase() === 'text') {
      const s = svg.getBoundingClientRect();
      if (r.left < s.left - 1 || r.right > s.right + 1 || r.top < s.top - 1 ||
          r.bottom > s.bottom + 1)
        out.push(`plot label "${el.textContent}" leaves its plot`);
      continue;
    }
    if (svg && svg !== el) continue;
    if (r.right > main.right + 1 || r.left < main.left - 1)
      out.push(`${name(el)} "${el.textContent.slice(0, 40)}" spans ${Math.round(r.left)}..` +
               `${Math.round(r.right)}, main ${Math.round(main.left)}..${Math.round(main.right)}`);
    else if (el.clientWidth && el.scrollWidth > el.clientWidth + 1)
      out.push(`${name(el)} "${el.textContent.slice(0, 40)}" content ${el.scrollWidth} > ` +
               `box ${el.clientWidth}`);
  }
  return out;
})()
"""


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


def screenshot(url: str, out: Path, height: int = 3800, width: int = SCREEN_PX) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = chromium(f"--window-size={width},{height}", f"--screenshot={out.resolve()}", url)
    assert proc.returncode == 0 and out.is_file(), proc.stderr[-2000:]
    return out


def artifacts_dir() -> Path:
    return Path(os.environ.get("RACKREADY_ARTIFACTS", "artifacts"))


def measure_overflow(html: Path, width: int, media: str, work: Path) -> list[str]:
    """OVERFLOW_JS's findings for a copy of the page laid out `width` px wide.

    The copy gets the measurement as a script at the end of <body>, which writes its
    findings into the DOM for --dump-dom to print. Print media is emulated by making the
    page's @media print rules apply to the screen as well, at the printable A4 width.
    """
    text = html.read_text(encoding="utf-8")
    if media == "print":
        text = text.replace("@media print", "@media all")
    probe = ("<script>document.body.dataset.overflow = encodeURIComponent(JSON.stringify("
             + OVERFLOW_JS.strip() + "));</script>")
    copy = work / f"{html.stem}-{media}-{width}.html"
    copy.write_text(text.replace("</body>", probe + "</body>"), encoding="utf-8")
    proc = chromium(f"--window-size={width},900", "--dump-dom", copy.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r'<body[^>]* data-overflow="([^"]*)"', proc.stdout)
    assert found, "the overflow probe did not run"
    return json.loads(unquote(found.group(1)))


@pytest.fixture(scope="module")
def reports(tmp_path_factory, lab_standard_run) -> dict[str, Path]:
    """HTML for the synthetic lab run (two nodes, rack), the real 2x H200 quick run and the
    lab's 8-GPU node at the standard level (its launch map's long bind.sh and srun lines)."""
    base = tmp_path_factory.mktemp("reports")
    lab = healthy_and_faulty(base / "lab")
    build_reports(lab, {"json", "html"})
    real = base / "real"
    (real / "h200x2").mkdir(parents=True)
    (real / "h200x2" / "result.json").write_bytes(gzip.decompress(REAL.read_bytes()))
    build_reports(real, {"json", "html"})
    build_reports(lab_standard_run, {"json", "html"})
    return {"lab-8gpu-node": lab_standard_run / "report" / "node-lab-gpu01.html",
            "lab-node": lab / "report" / "node-gpu02.html", "lab-rack": lab / "report/rack.html",
            "real-node": real / "report" / "node-h200x2.html",
            "real-rack": real / "report" / "rack.html"}


def test_console_capture_sees_errors(tmp_path: Path) -> None:
    # The no-console-errors assertion below only means something if errors are seen.
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>console.error('boom'); undefinedFn();</script>"
                    "<img src='missing.png'></body></html>")
    _, console = render(page.as_uri())
    assert any("boom" in c for c in console)
    assert any("undefinedFn" in c for c in console)


def test_overflow_measurement_sees_overflow(tmp_path: Path) -> None:
    # The no-overflow assertion below only means something if overflow is seen.
    page = tmp_path / "wide.html"
    page.write_text("<html><body><main style='width:600px'><table><tr><td "
                    "style='white-space:nowrap'>" + "x" * 400 + "</td></tr></table>"
                    "<svg width='100' height='50'><text x='60' y='20'>a clipped label</text>"
                    "</svg></main></body></html>")
    found = measure_overflow(page, SCREEN_PX, "screen", tmp_path)
    assert any(f.startswith("td") for f in found), found
    assert any("a clipped label" in f for f in found), found


@pytest.mark.parametrize("name", ["lab-node", "lab-rack", "real-node", "real-rack",
                                  "lab-8gpu-node"])
@pytest.mark.parametrize("media, width", [("screen", SCREEN_PX), ("print", PRINT_PX)])
def test_nothing_overflows_the_page_width(reports, tmp_path: Path, name: str, media: str,
                                          width: int) -> None:
    assert measure_overflow(reports[name], width, media, tmp_path) == []


def test_report_renders_without_console_errors(reports) -> None:
    node = reports["lab-node"].as_uri()
    dom, console = render(node)
    assert console == []
    assert "<title>SIMULATED — FAIL · node gpu02" in dom
    verdict = re.search(r'id="verdict">(.*?)</div>', dom, re.S).group(1)
    assert re.findall(r">([A-Z]+)<", verdict) == ["FAIL", "SIMULATED"]
    assert 'class="sim-banner"' in dom
    assert "GPU 3 (serial 1653124042737 as the inventory lists)" in dom
    assert dom.count('class="chart"') == 4
    shot = screenshot(node, artifacts_dir() / "report-screenshot.png")
    assert shot.read_bytes().startswith(b"\x89PNG")

    rack = reports["lab-rack"].as_uri()
    dom, console = render(rack)
    assert console == []
    assert 'href="node-gpu01.html"' in dom and "SIMULATED" in dom
    screenshot(rack, artifacts_dir() / "rack-screenshot.png", height=1400)

    real = reports["real-node"].as_uri()
    dom, console = render(real)
    assert console == [] and "SIMULATED" not in dom
    screenshot(real, artifacts_dir() / "real-node-screenshot.png", height=5200)
