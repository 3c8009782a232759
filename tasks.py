"""rackready's command surface: flags -> rackready.* calls -> exit codes. No logic here.

Exit codes: 0 success, 1 a node or check failed, 2 a person's mistake (bad flag
value, unknown node, malformed file) or a missing prerequisite.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path

from invoke import Collection, Exit, task

ROOT = Path(__file__).resolve().parent


def user_errors(fn):
    """Turn rackready's UserError into a one-line message and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from rackready.errors import UserError

        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise Exit(f"error: {exc}", code=2) from None
        except KeyboardInterrupt:
            raise Exit("interrupted", code=130) from None

    return wrapper


def required(**flags) -> None:
    """Required flags are checked here, not by invoke, so `TASK --help` always works."""
    from rackready.errors import UserError

    for name, value in flags.items():
        if value in (None, ""):
            raise UserError(f"--{name} is required")


# --- provisioning -------------------------------------------------------------


@task(
    help={
        "inventory": "inventory name under inventories/ (e.g. rack1, lab) or a path",
        "limit": "only these hosts or groups (Ansible --limit pattern)",
        "tags": "only these stages, comma-separated (bios,baseline,driver,fabric,cuda,nccl,...)",
        "check": "dry run: report what would change, change nothing",
        "diff": "show file and package differences",
        "playbook": "site (the default: OS baseline to RDMA and RAID) or slurm (join the "
                    "nodes to the site's Slurm: roles/slurm_node)",
    }
)
@user_errors
def provision(c, inventory=None, limit=None, tags=None, check=False, diff=False,
              playbook="site"):
    """Provision nodes: Ansible roles from OS baseline to RDMA and NVMe RAID."""
    required(inventory=inventory)
    from rackready.errors import UserError
    from rackready.steps.provision import PLAYBOOK_NAMES, run_playbook

    if playbook not in PLAYBOOK_NAMES:
        raise UserError(f"--playbook must be one of {', '.join(PLAYBOOK_NAMES)}, "
                        f"not '{playbook}'")
    extravars = None
    if playbook == "slurm":  # the health gate judges with what validate gives the suite
        from rackready.steps.validate import suite_sites

        extravars = {"slurm_node_health_sites": suite_sites(inventory)}
    _exit_with(run_playbook(inventory, f"{playbook}.yml", limit=limit, tags=tags,
                            check=check, diff=diff, extravars=extravars))


@task(
    help={
        "inventory": "inventory whose `staging` group holds the connected build host",
        "key_id": "GnuPG key on the staging host that signs the repository "
                  "(default: the inventory's offline_bundle_gpg_key_id)",
        "limit": "only these staging hosts (Ansible --limit pattern)",
        "dir": "folder on the staging host for the bundle (default /srv/rackready-bundle)",
        "wheelhouse": "take the wheels from this wheelhouse URL instead of an index",
    }
)
@user_errors
def bundle(c, inventory=None, key_id=None, limit=None, dir=None, wheelhouse=None):
    """Build the offline bundle (signed apt repository + wheelhouse) for air-gapped racks."""
    required(inventory=inventory)
    from rackready.steps.provision import build_bundle

    _exit_with(build_bundle(inventory, key_id=key_id, limit=limit, bundle_dir=dir,
                            wheelhouse=wheelhouse))


def _exit_with(result) -> None:
    """One line per host, then exit 1 if any host failed."""
    from rackready.steps.provision import report_run

    code = report_run(result)
    if code:
        raise Exit(code=code)


# --- validation and reports --------------------------------------------------


@task(
    help={
        "node": "validate this node (name in the inventory)",
        "inventory": "inventory to find nodes in (default: lab); alone, validates every node, "
                     "then the rack-level step (all_reduce + pairwise rails per fabric)",
        "level": "quick (<=2 min), standard (<=10 min) or burnin (hours, resumable)",
        "out": "run directory (default: runs/<timestamp>)",
        "report_formats": "reports to write after the run (default: json,html,pdf,junit)",
        "only": "only these checks, comma-separated (see `python -m validation checks`)",
        "resume": "continue an interrupted run in this run directory (burn-in resumes "
                  "from its last completed interval)",
        "via": "ssh (the default: the suite runs in each node's SSH session) or slurm "
               "(each node's suite as a Slurm job of its own, through rackready_slurm's "
               "submit host)",
        "partition": "with --via slurm: the partition (default: rackready_slurm.partition)",
        "drain": "with --via slurm: drain each node that did not pass, with its reason, and "
                 "resume a node rackready drained that now passes",
    }
)
@user_errors
def validate(c, node=None, inventory="lab", level="quick", out=None,
             report_formats="json,html,pdf,junit", only=None, resume=None, via="ssh",
             partition=None, drain=False):
    """Validate nodes over SSH: checks, burn-in, collectives, FSDP job, rack step -> verdicts."""
    from rackready.steps.validate import run_validation

    code = run_validation(node=node, inventory=inventory, level=level, out=out,
                          formats=report_formats, only=only, resume=resume, via=via,
                          partition=partition, drain=drain)
    if code:
        raise Exit(code=code)


@task(
    help={
        "inventory": "the site's inventory (the overlay goes to its calibration/ folder)",
        "nodes": "known-good nodes to calibrate on, comma-separated (at least 3 per profile)",
        "level": "the level whose figures set the floors (default: standard)",
        "out": "run directory of the calibration run (default: runs/calibrate-<timestamp>)",
        "only": "run only these checks (comma-separated names): the overlay then holds "
                "only their floors, the rest judged by the profile's own limits",
    }
)
@user_errors
def calibrate(c, inventory=None, nodes=None, level="standard", out=None, only=None):
    """Calibrate the performance floors on known-good nodes: one overlay per profile."""
    from rackready.steps.calibrate import run_calibration

    required(inventory=inventory, nodes=nodes)
    code = run_calibration(inventory, nodes, level=level, out=out, only=only)
    if code:
        raise Exit(code=code)


@task(
    help={
        "run": "run directory written by `invoke validate`",
        "format": "comma-separated: json,html,pdf,junit (default: all)",
        "diff": "compare two runs instead: RUN_A,RUN_B",
        "sign": "signer's name: sign every report of the run (needs --key)",
        "key": "Ed25519 private key from `invoke keygen` (passphrase from "
               "RACKREADY_SIGNING_PASSPHRASE)",
    }
)
@user_errors
def report(c, run=None, format="json,html,pdf,junit", diff=None, sign=None, key=None):
    """Write acceptance reports (JSON, HTML, PDF, JUnit) for a validation run; or sign them."""
    from rackready.report.cli import report_command

    code = report_command(run=run, formats=format, diff=diff, sign=sign, key=key)
    if code:
        raise Exit(code=code)


@task(
    help={
        "report": "report folder (RUN/report) or the run directory",
        "pubkey": "the operator's Ed25519 public key (PEM, the .pub from `invoke keygen`)",
    }
)
@user_errors
def verify(c, report=None, pubkey=None):
    """Verify a signed report folder with the operator's public key: one line per file."""
    required(report=report, pubkey=pubkey)
    from rackready.report.cli import verify_command

    code = verify_command(report, pubkey)
    if code:
        raise Exit(code=code)


@task(help={"out": "private key file to create; PATH.pub is written beside it (encrypted "
                   "when RACKREADY_SIGNING_PASSPHRASE is set)"})
@user_errors
def keygen(c, out=None):
    """Make an Ed25519 key pair for signing acceptance reports."""
    required(out=out)
    from rackready.report.cli import keygen_command

    keygen_command(out)


# --- the lab -------------------------------------------------------------------


@task(
    help={
        "nodes": "how many simulated nodes (default 2)",
        "profile": "one lab profile for every node (default: XE9680 and DL380a in turn)",
        "secure-boot": "boot the nodes with UEFI Secure Boot on (simulated; no MOK keys)",
    }
)
@user_errors
def lab_up(c, nodes=2, profile=None, secure_boot=False):
    """Boot simulated nodes (systemd-nspawn) with their package mirror; idempotent."""
    from rackready_lab import lab

    lab.up(int(nodes), profile, secure_boot=bool(secure_boot))
    _print_status(lab.status())


@task
@user_errors
def lab_down(c):
    """Stop every lab node and remove all it made (the root file system cache stays)."""
    from rackready_lab import lab

    lab.down()


@task
@user_errors
def lab_status(c):
    """Show the lab's nodes: running, SSH reachable, injected faults."""
    from rackready_lab import lab

    _print_status(lab.status())


@task(
    help={
        "node": "lab node name (e.g. lab-gpu01)",
        "fault": "fault kind (gpu-missing, nvlink-down, xid-79, ...; see lab.fault --help)",
        "target": "component to hit (e.g. a GPU index); default: one the fault picks",
    }
)
@user_errors
def lab_fault(c, node=None, fault=None, target=None):
    """Inject a simulated hardware fault into a lab node."""
    required(node=node, fault=fault)
    from rackready_lab import lab

    hit = lab.fault(node, fault, target)
    print(f"{node}: {fault} -> {hit}")


@task(help={"node": "lab node name"})
@user_errors
def lab_heal(c, node=None):
    """Remove every injected fault from a lab node."""
    required(node=node)
    from rackready_lab import lab

    lab.heal(node)
    print(f"{node}: healed")


@task(help={"node": "lab node name"})
@user_errors
def lab_reboot(c, node=None):
    """Reboot a lab node (after provisioning says a reboot is pending)."""
    required(node=node)
    from rackready_lab import lab

    lab.reboot(node)
    print(f"{node}: rebooted")


def _print_status(rows) -> None:
    if not rows:
        print("lab: no nodes (run `invoke lab.up`)")
        return
    print(f"{'node':<12} {'address':<14} {'platform':<22} {'fabric':<6} {'state':<8} faults")
    for r in rows:
        state = "up" if r.running and r.ssh else ("booting" if r.running else "down")
        print(f"{r.name:<12} {r.ip:<14} {r.platform:<22} {r.fabric:<6} {state:<8} "
              f"{','.join(r.faults) or '-'}")


# --- the whole loop, tests, lint ----------------------------------------------------


@task(help={"nodes": "lab nodes to run on (default 2: one healthy, one with a fault)"})
@user_errors
def demo(c, nodes=2):
    """The main job on the lab: lab up, provision, inject a fault, validate, report."""
    from rackready_lab.demo import run_demo

    code = run_demo(int(nodes))
    if code:
        raise Exit(code=code)


# The suite's tiers, in the order `invoke test` runs them (.ci/run times each one):
# pytest marker expressions, and lint (the `lint` task's linters over the tree).
TEST_TIERS = {
    "unit": "not integration and not lab and not browser",  # in-process, fast: in parallel
    # the node-side suite, its workers, the lab BMC and the CLI as real processes: in parallel
    "integration": "integration",
    "lab": "lab",  # real Ansible over real SSH into booted lab nodes: one process, in order
    "browser": "browser",  # the reports in headless Chromium
    "lint": None,
}


def _xdist_workers(tier: str) -> int:
    """Processes for the unit and integration tiers, 0 without pytest-xdist (then one
    process). Unit: one more than the cores, since many of its tests wait on a subprocess
    or a socket (on 2 cores 3 workers took it from 187 to 157 s); integration: one per
    core, since its workloads keep the cores busy and its health-gate tests hold time
    budgets. At most 5: each worker builds the session's shared fixtures once."""
    import importlib.util

    if importlib.util.find_spec("xdist") is None:
        print("test: pytest-xdist is not installed (pip install -e '.[test]'): "
              "the unit and integration tiers run in one process")
        return 0
    cores = os.cpu_count() or 1
    return max(1, min(cores + 1 if tier == "unit" else cores, 5))


def _pytest_tier(c, tier: str, k: str | None) -> int:
    import shlex

    args = [sys.executable, "-m", "pytest", "-m", str(TEST_TIERS[tier])]
    if tier in ("unit", "integration") and (workers := _xdist_workers(tier)):
        # worksteal: an idle worker takes queued tests from a busy one (a few take a minute)
        args += ["-n", str(workers), "--dist", "worksteal"]
    if k:
        args += ["-k", k]
    return c.run(shlex.join(args), pty=False, warn=True, env={"PYTHONUNBUFFERED": "1"}).exited


@task(
    help={
        "k": "only tests matching this expression (pytest -k)",
        "unit": "the unit tier: in-process tests, a few minutes; no root needed",
        "integration": "the integration tier: the node-side suite, its workers, the lab BMC "
                       "and the command line as real processes; no root needed",
        "lab": "the lab tier: boots lab nodes, provisions and validates them (root)",
        "browser": "the browser tier: the reports in headless Chromium",
        "packages": "install the Debian packages the tests use even for --unit or "
                    "--integration alone (every other tier installs them)",
    }
)
@user_errors
def test(c, k=None, unit=False, integration=False, lab=False, browser=False, packages=False):
    """Run the whole test suite (unit, integration, lab, browser, lint); installs what the
    tests need.

    With --unit, --integration, --lab or --browser only those tiers run (lint alone is
    `invoke lint`; -k selects tests, so it leaves lint out). Each tier runs even when one
    before it failed; the exit code is the first failed tier's."""
    picked = [t for t, on in (("unit", unit), ("integration", integration), ("lab", lab),
                              ("browser", browser)) if on]
    tiers = picked or [t for t in TEST_TIERS if not (k and t == "lint")]
    if packages or not set(tiers) <= {"unit", "integration"}:
        from rackready_lab.testenv import ensure_test_packages

        ensure_test_packages()
    codes = {}
    took = {}
    for tier in tiers:
        start = time.monotonic()
        if tier == "lint":
            try:
                lint(c)
                codes[tier] = 0
            except Exit as exc:
                print(f"test: {exc.message}" if exc.message else "test: lint failed")
                codes[tier] = exc.code or 1
        else:
            codes[tier] = _pytest_tier(c, tier, k)
        took[tier] = time.monotonic() - start
        print(f"test: tier {tier} {took[tier]:.0f} s"
              + ("" if codes[tier] == 0 else f", FAILED (exit {codes[tier]})"), flush=True)
    if len(tiers) > 1:
        print("test: " + ", ".join(f"{t} {'passed' if rc == 0 else f'exit {rc}'} "
                                   f"({took[t]:.0f} s)" for t, rc in codes.items())
              + f"; whole suite {sum(took.values()):.0f} s")
    # -k over several tiers: a tier it selects nothing in (pytest's 5) is no failure,
    # unless it selects nothing anywhere
    if k and len(tiers) > 1 and any(rc == 0 for rc in codes.values()):
        codes = {t: rc for t, rc in codes.items() if rc != 5}
    rc = next((rc for rc in codes.values() if rc), 0)
    if rc:
        raise Exit(code=rc)


def _all_at_once(commands: list[list[str]], env: dict[str, str]) -> list[str]:
    """Start every command at once, then print each one's output whole, in the order
    given; the names of those that failed."""
    import contextlib
    import subprocess
    import tempfile

    failed = []
    with contextlib.ExitStack() as stack:
        running = []
        for cmd in commands:
            out = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            try:
                proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out,
                                        stderr=subprocess.STDOUT)
            except OSError as exc:  # not installed: that tool fails, the others still run
                out.write(f"cannot start {cmd[0]}: {exc.strerror}\n")
                proc = None
            running.append((cmd, out, proc))
        for cmd, out, proc in running:
            rc = proc.wait() if proc else 127
            out.seek(0)
            name = Path(cmd[0]).name
            print(f"$ {' '.join([name, *cmd[1:]])}\n{out.read()}", end="", flush=True)
            if rc:
                failed.append(name)
    return failed


@task
def lint(c):
    """ruff, yamllint, ansible-lint (production profile), mypy and the layer contract
    (lint-imports: pyproject's [tool.importlinter]) over the tree, all at once (each is one
    process on one core; mypy takes the longest)."""
    bindir = Path(sys.executable).parent
    # PYTHONPATH: lint-imports reads this tree's packages, not an installed copy
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT)}
    linters = [["ruff", "check", "."], ["yamllint", "-s", "."], ["ansible-lint"],
               ["mypy"],  # rackready, validation, tasks.py: [tool.mypy] in pyproject.toml
               ["lint-imports"]]
    failed = _all_at_once([[str(bindir / tool), *args] for tool, *args in linters], env)
    if failed:
        raise Exit(f"lint failed: {', '.join(failed)}", code=1)


# invoke types a bare @task as returning a Callable (it returns a Task): hence the ignores
lab_ns = Collection("lab")
lab_ns.add_task(lab_up, "up")
lab_ns.add_task(lab_down, "down")  # type: ignore[arg-type]
lab_ns.add_task(lab_status, "status")  # type: ignore[arg-type]
lab_ns.add_task(lab_fault, "fault")
lab_ns.add_task(lab_heal, "heal")
lab_ns.add_task(lab_reboot, "reboot")

ns = Collection()
for t in (provision, bundle, validate, calibrate, report, verify, keygen, demo, test, lint):
    ns.add_task(t)  # type: ignore[arg-type]
ns.add_collection(lab_ns)
ns.configure({"run": {"echo": False}})
