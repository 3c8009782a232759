"""Command line for the reports; tasks.py can call main(argv) or the functions it wraps.

Exit codes: 0 done (verify: hash matches; summary: every node PASS), 1 a node is
not PASS (summary) or a hash does not match (verify), 2 a usage or input error.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from rackready.report.build import FORMATS, build_documents, build_reports, render_reports
from rackready.report.canonical import sign_report, verify_report
from rackready.report.diff import DEFAULT_NOISE, compare_runs, diff_runs, format_diff
from rackready.report.errors import ReportError
from rackready.report.summary import summary_table, terminal_summary


def _formats(text: str) -> set[str]:
    chosen = {f.strip() for f in text.split(",") if f.strip()}
    if not chosen or chosen - FORMATS:
        raise argparse.ArgumentTypeError(f"choose from {','.join(sorted(FORMATS))}")
    return chosen


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rackready.report",
                                description="Acceptance reports from a run directory.")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write JSON, HTML, PDF and JUnit into RUN/report/")
    b.add_argument("--run", type=Path, required=True, help="run directory")
    b.add_argument("--formats", type=_formats, default=set(FORMATS),
                   help="comma-separated subset of json,html,pdf,junit (default: all)")
    s = sub.add_parser("summary", help="print the terminal summary of a run")
    s.add_argument("--run", type=Path, required=True, help="run directory")
    g = sub.add_parser("sign", help="record the operator's sign-off in a report JSON")
    g.add_argument("--report", type=Path, required=True, help="node-*.json or rack.json")
    g.add_argument("--operator", required=True, help="name of the person signing")
    v = sub.add_parser("verify", help="check a report JSON against its sha256")
    v.add_argument("--report", type=Path, required=True, help="node-*.json or rack.json")
    d = sub.add_parser("diff", help="what changed between two runs of the same node")
    d.add_argument("run_a", type=Path, help="earlier run directory")
    d.add_argument("run_b", type=Path, help="later run directory")
    d.add_argument("--noise", type=float, default=DEFAULT_NOISE,
                   help="relative change treated as noise (default 0.05)")
    d.add_argument("--json", action="store_true", help="print the structured diff as JSON")
    return p


def run(args: argparse.Namespace) -> int:
    if args.cmd == "build":
        try:
            paths = build_reports(args.run, args.formats)
        except ReportError as e:
            for path in e.written:
                print(f"wrote {path}")
            raise
        for path in paths:
            print(f"wrote {path}")
        print(terminal_summary(args.run), end="")
        return 0
    if args.cmd == "summary":
        rack, node_docs = build_documents(args.run)
        print(summary_table(rack, node_docs), end="")
        return 0 if rack["outcome"] == "PASS" else 1
    if args.cmd == "sign":
        sign_report(args.report, args.operator)
        formats = {"html", "junit"} | ({"pdf"} if any(args.report.parent.glob("*.pdf")) else set())
        render_reports(args.report.parent, formats)
        print(f"signed {args.report} as {args.operator}")
        return 0
    if args.cmd == "verify":
        ok = verify_report(args.report)
        print(f"{args.report}: {'sha256 OK' if ok else 'sha256 MISMATCH: content was changed'}")
        return 0 if ok else 1
    diff = compare_runs(args.run_a, args.run_b, args.noise)
    print(json.dumps(asdict(diff), indent=2) if args.json else format_diff(diff, args.noise),
          end="\n" if args.json else "")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


# --- used by tasks.py (invoke report / invoke validate) ---------------------------


def parse_formats(text: str) -> set[str]:
    """"json,html" -> {"json", "html"}; a wrong name is the person's mistake."""
    from rackready.errors import UserError

    chosen = {f.strip() for f in (text or "").split(",") if f.strip()}
    if not chosen or chosen - FORMATS:
        raise UserError(f"--format: choose from {','.join(sorted(FORMATS))}, not '{text}'")
    return chosen


def write_reports(run_dir: Path, formats: str) -> list[Path]:
    """Write the reports of a run and print where; report problems as one line."""
    from rackready.errors import UserError

    try:
        paths = build_reports(Path(run_dir), parse_formats(formats))
    except ReportError as e:
        for path in e.written:
            print(f"wrote {path}")
        raise UserError(str(e)) from None
    for path in paths:
        print(f"wrote {path}")
    return paths


def report_command(run: str | None, formats: str, diff: str | None, sign: str | None) -> int:
    """`invoke report`: build (default), --diff A,B, or --sign NAME. Returns the exit code."""
    from rackready.errors import UserError

    try:
        if diff:
            parts = [p for p in diff.split(",") if p]
            if len(parts) != 2:
                raise UserError("--diff takes two run directories: RUN_A,RUN_B")
            print(diff_runs(Path(parts[0]), Path(parts[1])), end="")
            return 0
        if not run:
            raise UserError("--run is required (a run directory written by `invoke validate`)")
        run_dir = Path(run)
        if sign:
            reports = sorted((run_dir / "report").glob("node-*.json"))
            if not reports:
                raise UserError(f"no node reports under {run_dir / 'report'}; build them first")
            for path in reports:
                sign_report(path, sign)
                print(f"signed {path} as {sign}")
            render_reports(run_dir / "report", parse_formats(formats) - {"json"} or {"html"})
            return 0
        write_reports(run_dir, formats)
        print(terminal_summary(run_dir), end="")
        rack, _ = build_documents(run_dir)
        return 0 if rack["outcome"] == "PASS" else 1
    except ReportError as e:
        raise UserError(str(e)) from None
