"""PDF through headless Chromium: the printed copy of the HTML, same content."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rackready.report.errors import ReportError

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
MISSING = ("PDF needs headless Chromium, which was not found: install the Debian package "
           "'chromium' (apt-get install chromium) or set RACKREADY_CHROMIUM")

# A fresh profile and no background traffic: the controller may be air-gapped.
BASE_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--no-default-browser-check", "--no-pdf-header-footer")


def find_chromium() -> str | None:
    override = os.environ.get("RACKREADY_CHROMIUM")
    if override:
        return override if Path(override).is_file() else shutil.which(override)
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def chromium_command(binary: str, profile_dir: str, *args: str) -> list[str]:
    return [binary, *BASE_FLAGS, f"--user-data-dir={profile_dir}", *args]


def html_to_pdf(html: Path, pdf: Path, timeout_s: float = 120.0) -> Path:
    binary = find_chromium()
    if not binary:
        raise ReportError(MISSING)
    with tempfile.TemporaryDirectory(prefix="rackready-chromium-") as profile:
        cmd = chromium_command(binary, profile, f"--print-to-pdf={pdf.resolve()}",
                               html.resolve().as_uri())
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise ReportError(f"chromium did not print {html.name} within {timeout_s:.0f} s") \
                from None
        except OSError as e:
            raise ReportError(f"could not start chromium ({binary}): {e.strerror}") from None
    if not pdf.is_file() or not pdf.read_bytes().startswith(b"%PDF"):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReportError(f"chromium failed to print {html.name} (exit {proc.returncode}): "
                          f"{last}")
    return pdf
