"""`invoke demo`: the whole loop on the lab, end to end.

Installs what the controller lacks (the lab's Debian packages, Chromium and a
font for the PDF), boots the lab, provisions every node, injects one hardware
fault into the last node, validates all nodes and writes the reports (JSON,
HTML, JUnit, PDF). It has shown what it set out to show when the healthy
nodes PASS and the faulty one FAILs on the checks the fault trips, as the
written rack report says. A report format that cannot be written is named
with its reason in one line; the others are still written.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rackready.errors import EnvironmentProblem, UserError
from rackready.report import build as report_build
from rackready.report.errors import ReportError
from rackready.sanitize import one_line
from rackready.steps.provision import report_run, run_playbook
from rackready.steps.validate import run_validation
from rackready_lab import lab
from rackready_lab.shell import missing_host_packages
from rackready_lab.testenv import ensure_controller_packages

PROJECT_ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = PROJECT_ROOT / "runs" / "demo"
DEMO_FAULT = "ecc-uncorrectable"
# what an uncorrectable ECC error must trip (tests/fault_expectations.py holds the same)
DEMO_FAULT_CHECKS = ("gpu.health", "gpu.xid")
# JSON comes with the validation run; each of these renders from it on its own
RENDERED = ("html", "junit", "pdf")

Out = Callable[[str], None]


def run_demo(nodes: int = 2, out: Out = print) -> int:
    if nodes < 2:
        raise UserError("the demo needs at least 2 nodes: one healthy, one faulty")
    step = _Steps(out)
    with step("controller packages (lab, Chromium and a font for the PDF)"):
        no_pdf = _controller_packages(out)
    with step("lab.up"):
        specs = lab.up(nodes)
        for spec in specs:
            lab.heal(spec.name)  # a re-run starts from healthy hardware
    with step("provision --inventory lab"):
        result = run_playbook("lab", quiet=True)
        if report_run(result, out=out):
            out("demo: provisioning failed (see the lines above); the demo stops here")
            return 1
    with step("lab.reboot (the kernel arguments provisioning set take effect)"):
        lab.reboot_all([spec.name for spec in specs])
    faulty = specs[-1].name
    with step(f"lab.fault --node {faulty} --fault {DEMO_FAULT}"):
        out(f"{faulty}: {lab.fault(faulty, DEMO_FAULT)}")
    with step("validate --inventory lab --level quick"):
        shutil.rmtree(RUN_DIR, ignore_errors=True)
        # JSON here; HTML, JUnit and PDF below, each on its own so one that fails
        # leaves the others written
        run_validation(node=None, inventory="lab", level="quick", out=str(RUN_DIR),
                       formats="json")
    report_dir = report_build.report_dir_for(RUN_DIR)
    with step("report --format html,junit,pdf"):
        problems = write_rendered(report_dir, out, known={"pdf": no_pdf} if no_pdf else {})
    shown = judge_demo(report_dir, [s.name for s in specs], faulty, out)
    show_where(report_dir, out)
    out("the lab stays up for exploring: `invoke lab.status`, `invoke lab.down`")
    for p in problems:
        out(f"demo: {p}")
    if not shown:
        return 1
    return 1 if problems else 0


class _Steps:
    """`with step(title):` prints the step and, after it, how long it took."""

    def __init__(self, out: Out) -> None:
        self.out = out

    def __call__(self, title: str) -> _Steps:
        self.title = title
        return self

    def __enter__(self) -> None:
        self.out(f"== {self.title}")
        self.t0 = time.monotonic()

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.out(f"   ({time.monotonic() - self.t0:.0f} s)")
        elif issubclass(kind, UserError):  # tasks.py prints the one line and exits 2
            self.out(f"demo: step '{self.title}' could not run")


def _controller_packages(out: Out) -> str:
    """Install what is missing; returns why the PDF cannot be made ("" when it can)."""
    try:
        installed = ensure_controller_packages()
    except EnvironmentProblem as exc:
        if missing_host_packages():
            raise  # without the lab's packages nothing after this can run
        # the lab can run; only the PDF renderer is missing: the PDF step says so
        why = f"Chromium/fonts could not be installed ({one_line(str(exc))})"
        out(f"   {why}")
        return why
    out(f"   installed {' '.join(installed)}" if installed else "   all present")
    return ""


def write_rendered(report_dir: Path, out: Out, known: dict[str, str] | None = None
                   ) -> list[str]:
    """HTML, JUnit and PDF from the run's JSON reports, each format on its own: one that
    cannot be written is named with its reason (`known`: a cause found earlier), in one
    line; the others are still written."""
    problems = []
    for fmt in RENDERED:
        try:
            report_build.render_reports(report_dir, {fmt})
        except (ReportError, UserError, OSError) as exc:
            why = (known or {}).get(fmt) or one_line(str(exc))
            problems.append(f"{fmt.upper()} reports not written: {why}")
            out(f"   {fmt}: not written")
    return problems


def read_rack(report_dir: Path) -> dict[str, Any]:
    path = report_dir / "rack.json"
    try:
        rack = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"the demo run wrote no readable {path}: {exc}") from None
    if not isinstance(rack, dict) or not isinstance(rack.get("nodes"), list):
        raise UserError(f"{path}: no nodes list")
    return rack


def judge_demo(report_dir: Path, names: list[str], faulty: str, out: Out) -> bool:
    """Did the run show what the demo set out to show? Read from the written rack report:
    healthy nodes PASS; the faulty one FAILs, on a check the injected fault trips."""
    by_node = {str(n.get("node")): n for n in read_rack(report_dir)["nodes"]
               if isinstance(n, dict)}
    shown = True
    for name in names:
        entry = by_node.get(name, {})
        outcome = str(entry.get("outcome", "no report"))
        want = "FAIL" if name == faulty else "PASS"
        reason = one_line(str(entry.get("outcome_reason") or ""), 150)
        ok = outcome == want
        if ok and name == faulty:
            hit = [f for f in entry.get("failures") or ()
                   if isinstance(f, dict) and f.get("check") in DEMO_FAULT_CHECKS]
            ok = bool(hit)
            if hit:
                f = hit[0]
                reason = one_line(f"{f.get('check')}: {f.get('message')}", 150)
        shown &= ok
        verdict = "as designed" if ok else "NOT as designed"
        out(f"{name}: {outcome} (expected {want}, {verdict})" + (f": {reason}" if reason else ""))
    return shown


def show_where(report_dir: Path, out: Out) -> None:
    """Where the reports are and how to open them."""
    d = report_dir.resolve()
    out(f"reports in {d}/")
    rack = d / "rack.html"
    if rack.is_file():
        out(f"  open in a browser: {rack.as_uri()}")
    pdfs = sorted(d.glob("*.pdf"))
    if pdfs:
        out(f"  PDF: {', '.join(str(p) for p in pdfs)}")
    data = [p.name for p in sorted(d.glob("*.json")) if p.name != "SIGNATURES.json"]
    if data:
        out(f"  JSON: {', '.join(data)}" + ("; JUnit: junit.xml" if (d / "junit.xml").is_file()
                                            else ""))
