"""build_reports: run directory -> run_dir/report/{node-*.json, rack.json, html, pdf, junit}.

JSON is always written (every other format renders from it). Rebuilding a run
writes fresh, unsigned reports: a sign-off covers one exact content.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rackready.decide.judge import judged
from rackready.report.document import (
    build_node_report,
    build_rack_report,
    fleet_stats,
    now_iso,
)
from rackready.report.errors import ReportError
from rackready.report.loader import RunData, load_judged, open_run
from rackready.report.render.html import render_node_html, render_rack_html
from rackready.report.render.junit import render_junit
from rackready.report.render.pdf import html_to_pdf
from rackready.report.schema import validate_report
from rackready.report.seal.canonical import read_report, report_sha256, write_report
from rackready.run.rundir import REPORT_DIRNAME
from rackready.sanitize import one_line

FORMATS = frozenset({"json", "html", "pdf", "junit"})


def load_run(run_dir: Path) -> RunData:
    """A run as the reports read it: judged first (rackready.decide; a run already
    judged is read as judged, nothing is written), then loaded."""
    run = open_run(Path(run_dir))
    return load_judged(run, judged(run))


def build_documents(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The rack report and node reports for a run, schema-checked, not written."""
    data = load_run(Path(run_dir))
    generated = now_iso()
    fleet = fleet_stats(data.nodes)
    node_docs = [build_node_report(n, data.run, fleet, generated) for n in data.nodes]
    rack = build_rack_report(data, node_docs, generated)
    for doc in (*node_docs, rack):
        validate_report(doc)
    return rack, node_docs


def report_dir_for(run_dir: Path) -> Path:
    return Path(run_dir) / REPORT_DIRNAME


def build_reports(run_dir: Path, formats: set[str]) -> list[Path]:
    """Write the requested formats (JSON always) into run_dir/report/; return the paths."""
    unknown = set(formats) - FORMATS
    if unknown:
        raise ReportError(f"unknown report format(s) {sorted(unknown)}; choose from "
                          f"{sorted(FORMATS)}")
    rack, node_docs = build_documents(run_dir)
    out = report_dir_for(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("node-*.*"):
        stale.unlink()  # a re-run starts clean: no report of a node that is gone
    (out / "SIGNATURES.json").unlink(missing_ok=True)  # a rebuilt report is unsigned
    written = []
    for doc in node_docs:
        path = out / f"node-{doc['node']}.json"
        write_report(path, doc)
        written.append(path)
    write_report(out / "rack.json", rack)
    written.append(out / "rack.json")
    # the documents were built, schema-checked and sealed above: rendered as read back
    return written + render_reports(out, set(formats) - {"json"}, _prior=written,
                                    _checked=True)


def load_report_dir(report_dir: Path, *, _checked: bool = False
                    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read rack.json and its node reports, refusing any whose content fails its hash
    or the schema (unless build_reports has just built, checked and sealed them)."""
    report_dir = Path(report_dir)
    rack_path = report_dir / "rack.json"
    rack = read_report(rack_path)
    docs = [rack]
    node_docs = []
    for entry in rack.get("nodes", []):
        if not entry.get("report"):
            continue
        doc = read_report(report_dir / entry["report"])
        node_docs.append(doc)
        docs.append(doc)
    if _checked:
        return rack, node_docs
    for doc in docs:
        if doc["sha256"] != report_sha256(doc):
            name = doc.get("node", "rack")
            raise ReportError(f"{report_dir}: report for {name} does not match its sha256; "
                              "rebuild it from the run directory")
        validate_report(doc)
    return rack, node_docs


def render_reports(report_dir: Path, formats: set[str],
                   _prior: list[Path] | None = None, _checked: bool = False) -> list[Path]:
    """Render HTML/JUnit/PDF from the JSON already in report_dir (PDF last). A format
    that fails never takes the others with it: each is written if it can be, then the
    first failure is raised as one line (ReportError, with what was written)."""
    rack, node_docs = load_report_dir(report_dir, _checked=_checked)
    written: list[Path] = []
    failed: list[str] = []

    def html() -> None:
        for doc in node_docs:
            path = report_dir / f"node-{doc['node']}.html"
            path.write_text(render_node_html(doc), encoding="utf-8")
            written.append(path)
        path = report_dir / "rack.html"
        path.write_text(render_rack_html(rack, node_docs), encoding="utf-8")
        written.append(path)

    def junit() -> None:
        path = report_dir / "junit.xml"
        path.write_text(render_junit(rack, node_docs), encoding="utf-8")
        written.append(path)

    def pdf() -> None:
        htmls = [report_dir / "rack.html"] + [report_dir / f"node-{d['node']}.html"
                                             for d in node_docs]
        for page in htmls:
            written.append(html_to_pdf(page, page.with_suffix(".pdf")))

    wanted = [(name, step) for name, step, want in (
        ("HTML", html, "html" in formats or "pdf" in formats), ("JUnit", junit, "junit" in formats),
        ("PDF", pdf, "pdf" in formats)) if want]
    for name, step in wanted:
        if name == "PDF" and failed and failed[0].startswith("HTML"):
            failed.append("PDF: not rendered, its HTML failed")
            continue
        try:
            step()
        except ReportError as e:
            failed.append(f"{name}: {e}")
        except Exception as e:  # noqa: BLE001 -- a renderer's bug is one line, never a lost run
            failed.append(f"{name} renderer failed: {type(e).__name__}: "
                          f"{one_line(str(e), 200)}")
    if failed:
        rest = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise ReportError(f"{failed[0]}{rest}; the other reports were written",
                          written=[*(_prior or []), *written])
    return written
