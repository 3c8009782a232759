"""Acceptance reports: run directory -> schema-checked JSON -> HTML, PDF, JUnit, summary.

The JSON written by build_reports is the source of truth; every other format is
rendered from it and never re-judges a result.
"""

from __future__ import annotations

from rackready.report.build import FORMATS, build_reports, render_reports
from rackready.report.diff import compare_runs, diff_runs
from rackready.report.errors import ReportError
from rackready.report.render.summary import terminal_summary
from rackready.report.seal.canonical import verify_report
from rackready.report.seal.signing import sign_reports, verify_report_dir

__all__ = [
    "FORMATS",
    "ReportError",
    "build_reports",
    "compare_runs",
    "diff_runs",
    "render_reports",
    "sign_reports",
    "terminal_summary",
    "verify_report",
    "verify_report_dir",
]
