"""Command line for the reports; tasks.py can call main(argv) or the functions it wraps.

Exit codes: 0 done (verify: every file verifies; summary: every node PASS), 1 a node
is not PASS (summary) or a file fails verification (verify), 2 a usage or input error
(missing folder, bad key file, wrong passphrase).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from rackready.errors import UserError
from rackready.report.build import FORMATS, build_documents, build_reports, render_reports
from rackready.report.diff import DEFAULT_NOISE, compare_runs, diff_runs, format_diff
from rackready.report.errors import ReportError
from rackready.report.render.summary import summary_table, terminal_summary
from rackready.report.seal.canonical import load_json
from rackready.report.seal.signing import (
    MANIFEST,
    PASSPHRASE_ENV,
    fingerprint,
    generate_key,
    load_private_key,
    load_public_key,
    resolve_report_dir,
    sign_reports,
    verify_report_dir,
    write_manifest,
)
from rackready.sanitize import one_line


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
    g = sub.add_parser("sign", help="sign every report of a run with an Ed25519 key")
    g.add_argument("--report", type=Path, required=True,
                   help="report folder (RUN/report) or the run directory")
    g.add_argument("--operator", required=True, help="name of the person signing")
    g.add_argument("--key", type=Path, required=True,
                   help=f"Ed25519 private key (PEM); passphrase from {PASSPHRASE_ENV}")
    v = sub.add_parser("verify", help="check every file of a signed report folder")
    v.add_argument("--report", type=Path, required=True,
                   help="report folder (RUN/report) or the run directory")
    v.add_argument("--pubkey", type=Path, required=True,
                   help="the operator's Ed25519 public key (PEM)")
    k = sub.add_parser("keygen", help="make an Ed25519 signing key and PATH.pub")
    k.add_argument("--out", type=Path, required=True,
                   help=f"private key file to create (encrypted when {PASSPHRASE_ENV} is set)")
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
        for line in sign_run(args.report, args.operator, args.key):
            print(line)
        return 0
    if args.cmd == "verify":
        return verify_run(args.report, args.pubkey)
    if args.cmd == "keygen":
        print(keygen(args.out))
        return 0
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
    chosen = {f.strip() for f in (text or "").split(",") if f.strip()}
    if not chosen or chosen - FORMATS:
        raise UserError(f"--format: choose from {','.join(sorted(FORMATS))}, not '{text}'")
    return chosen


def write_reports(run_dir: Path, formats: str) -> list[Path]:
    """Write the reports of a run and print where; report problems as one line."""
    try:
        paths = build_reports(Path(run_dir), parse_formats(formats))
    except ReportError as e:
        for path in e.written:
            print(f"wrote {path}")
        raise UserError(str(e)) from None
    for path in paths:
        print(f"wrote {path}")
    return paths


# --- signing and verification (docs/signing.md) --------------------------------------


def present_formats(report_dir: Path) -> set[str]:
    """The rendered formats already in a report folder: signing re-renders exactly these."""
    found = {"html"} if any(report_dir.glob("*.html")) else set()
    found |= {"pdf"} if any(report_dir.glob("*.pdf")) else set()
    found |= {"junit"} if (report_dir / "junit.xml").exists() else set()
    return found


def sign_run(report: Path, name: str, key_path: Path,
             when: datetime | None = None) -> list[str]:
    """Sign the JSON reports, re-render the other formats from them, write the signed
    manifest, then verify the folder with the public key. On failure the JSON reports
    are put back as they were."""
    key = load_private_key(key_path)  # passphrase problems before anything is touched
    report_dir = resolve_report_dir(report)
    originals = {p: p.read_bytes() for p in report_dir.glob("*.json")}
    signed = sign_reports(report_dir, key, name, when)  # checks everything before writing
    try:
        rendered = render_reports(report_dir, present_formats(report_dir))
        manifest = write_manifest(report_dir, key, name, when)
        failed = [c for c in verify_report_dir(report_dir, key.public_key()) if not c.ok]
        if failed:
            raise ReportError(f"{failed[0].name} does not verify after signing: "
                              f"{'; '.join(failed[0].problems)}")
    except BaseException:
        for path, data in originals.items():
            if path.read_bytes() != data:
                path.write_bytes(data)
        if (report_dir / MANIFEST).exists() and report_dir / MANIFEST not in originals:
            (report_dir / MANIFEST).unlink()
        with contextlib.suppress(Exception):  # best effort: pages match the unsigned JSON
            render_reports(report_dir, present_formats(report_dir) - {"pdf"})
        raise
    fp = fingerprint(key.public_key())
    return ([f"signed {p} as {name.strip()}" for p in signed]
            + [f"rendered {p}" for p in rendered]
            + [f"wrote {manifest}", f"key {fp}"])


def _what_is_verified(report: Path) -> str:
    """The run, inventory, outcome and signer the folder claims, so two racks' signed
    folders are told apart (the claim itself is what the lines below verify)."""
    try:
        rack = load_json((resolve_report_dir(report) / "rack.json").read_text("utf-8"))
        signoff = rack.get("signoff") or {}
        return one_line(
            f"{report}: rack report of run {rack.get('run_id')}, inventory "
            f"{rack.get('inventory')}, {rack.get('outcome')}, signed by "
            f"{signoff.get('name') or 'nobody'} on {signoff.get('date') or '-'}", 400)
    except (OSError, ValueError, AttributeError, ReportError):
        return f"{report}: no readable rack.json: which run this is cannot be told"


def verify_run(report: Path, pubkey: Path) -> int:
    """Print one line per file; 0 when every file verifies, 1 otherwise."""
    pub = load_public_key(pubkey)
    checks = verify_report_dir(report, pub)
    print(_what_is_verified(report))
    width = max(len(c.name) for c in checks)
    for c in checks:
        status = f"OK      ({c.note})" if c.ok else f"FAILED  {'; '.join(c.problems)}"
        print(f"{c.name:<{width}}  {status}")
    bad = sum(not c.ok for c in checks)
    print(f"{len(checks) - bad} of {len(checks)} files verify with key {fingerprint(pub)}"
          + ("" if not bad else f"; {bad} FAILED"))
    return 1 if bad else 0


def keygen(out: Path) -> str:
    private, public, fp = generate_key(out)
    locked = "passphrase-protected" if b"ENCRYPTED" in private.read_bytes() else "not encrypted"
    return (f"wrote {private} (private, mode 0600, {locked}) and {public} (give this one "
            f"to the customer); fingerprint {fp}")


def report_command(run: str | None, formats: str, diff: str | None, sign: str | None,
                   key: str | None = None) -> int:
    """`invoke report`: build (default), --diff A,B, or --sign NAME --key KEY."""
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
        if sign or key:
            if not (sign and key):
                raise UserError("signing takes both --sign NAME and --key KEYFILE (make a key "
                                "with `invoke keygen --out KEYFILE`)")
            if not (run_dir / "report" / "rack.json").exists():
                raise UserError(f"no reports under {run_dir / 'report'}; build them first "
                                f"(invoke report --run {run})")
            for line in sign_run(run_dir / "report", sign, Path(key)):
                print(line)
            return 0
        write_reports(run_dir, formats)
        print(terminal_summary(run_dir), end="")
        rack, _ = build_documents(run_dir)
        return 0 if rack["outcome"] == "PASS" else 1
    except ReportError as e:
        raise UserError(str(e)) from None


def verify_command(report: str | None, pubkey: str | None) -> int:
    """`invoke verify`: 0 all files verify, 1 a file fails; bad input is a UserError."""
    if not report or not pubkey:
        raise UserError("verify takes --report RUN/report and --pubkey operator.pub")
    try:
        return verify_run(Path(report), Path(pubkey))
    except ReportError as e:
        raise UserError(str(e)) from None


def keygen_command(out: str | None) -> int:
    if not out:
        raise UserError("--out is required: the private key file to create")
    try:
        print(keygen(Path(out)))
    except ReportError as e:
        raise UserError(str(e)) from None
    return 0
