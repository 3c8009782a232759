"""`invoke demo`: the whole loop on the lab, end to end.

Boots the lab, provisions every node, injects one hardware fault into the
last node, validates all nodes and writes the reports. It succeeds when the
healthy nodes pass and the faulty one fails naming the component.
"""

from __future__ import annotations

from pathlib import Path

from rackready.errors import UserError
from rackready.lab import lab
from rackready.provision import report_run, run_playbook

DEMO_FAULT = "ecc-uncorrectable"


def run_demo(nodes: int = 2, out=print) -> int:
    if nodes < 2:
        raise UserError("the demo needs at least 2 nodes: one healthy, one faulty")
    out("== lab.up")
    specs = lab.up(nodes)
    for spec in specs:
        lab.heal(spec.name)  # a re-run starts from healthy hardware
    out("== provision --inventory lab")
    result = run_playbook("lab", quiet=True)
    if report_run(result, out=out):
        out("provisioning failed; see the log above")
        return 1
    for spec in specs:  # provisioning flags a reboot for the kernel arguments
        lab.reboot(spec.name)
    out("== lab.reboot (kernel arguments take effect)")
    faulty = specs[-1].name
    hit = lab.fault(faulty, DEMO_FAULT)
    out(f"== lab.fault --node {faulty} --fault {DEMO_FAULT}: {hit}")
    out("== validate --inventory lab --level quick")
    from rackready.validate import run_validation

    run_dir = Path("runs") / "demo"
    _clear(run_dir)
    run_validation(node=None, inventory="lab", level="quick", out=str(run_dir))
    return _judge_demo(run_dir, [s.name for s in specs], faulty, out)


def _clear(run_dir: Path) -> None:
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)


def _judge_demo(run_dir: Path, names: list[str], faulty: str, out) -> int:
    import json

    ok = True
    for name in names:
        path = run_dir / name / "result.json"
        outcome = json.loads(path.read_text())["outcome"] if path.exists() else "INCOMPLETE"
        expected = "FAIL" if name == faulty else "PASS"
        ok &= outcome == expected
        out(f"{name}: {outcome} (expected {expected})")
    report = run_dir / "report" / "rack.html"
    out(f"reports: {report.parent}/ (open {report})")
    out("the lab stays up for exploring: `invoke lab.status`, `invoke lab.down`")
    return 0 if ok else 1
