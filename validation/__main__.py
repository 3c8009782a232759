"""python -m validation: run the node-side suite, list checks, list profiles.

    python -m validation run --profile P --level quick|standard|burnin --out DIR
        [--sysroot ROOT] [--site FILE.yml] [--only CHECK,...]
        [--gpus N] [--without NEED,...] [--resume] [--textfile-dir DIR]
    python -m validation health --profile P [--gpus N] [--without NEED,...]
        [--sysroot ROOT] [--site FILE.yml] [--textfile-dir DIR] [--drain]
    python -m validation checks
    python -m validation profiles

Exit codes: 0 PASS (health: healthy), 1 FAIL or INCOMPLETE (unhealthy), 2 a usage mistake
(one line on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import yaml


class UsageError(Exception):
    pass


def _site(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"--site {path}: {exc.strerror}") from None
    except yaml.YAMLError:
        raise UsageError(f"--site {path}: not valid YAML") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--site {path}: must be a mapping (fabric, mtu, roce_priority, node)")
    return data


def _csv(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def _profile(args: argparse.Namespace) -> tuple[Any, Path]:
    """The profile scoped and with the site's settings, and the sysroot (run and health)."""
    from validation.profile import ProfileError, load_profile, scope, with_site

    try:
        profile = load_profile(args.profile)
        if args.gpus is not None or args.without:
            profile = scope(profile, args.gpus, tuple(_csv(args.without)))
        profile = with_site(profile, _site(args.site))
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    sysroot = Path(args.sysroot)
    if not sysroot.is_dir():
        raise UsageError(f"--sysroot {sysroot}: not a directory")
    return profile, sysroot


def cmd_run(args: argparse.Namespace) -> int:
    from validation.resume import FINAL, check_resumable, read_previous
    from validation.runner import run_suite

    profile, sysroot = _profile(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    previous = None
    if args.resume:
        try:
            previous = read_previous(out)
            check_resumable(previous, profile.name, args.level, profile.scope)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if previous.outcome in FINAL:
            print(f"run {previous.run_id} in {out} already finished: {previous.outcome}; "
                  "nothing to resume", file=sys.stderr)
            return 0 if previous.outcome == "PASS" else 1
    try:
        # The controller ships the suite as a bundle and names its content hash.
        result = run_suite(profile, args.level, out, sysroot, _site(args.site),
                           _csv(args.only) or None,
                           bundle_sha256=os.environ.get("RACKREADY_BUNDLE_SHA256"),
                           resume=previous,
                           # the controller's token for this run, echoed back (replay check)
                           nonce=os.environ.get("RACKREADY_RUN_NONCE") or None,
                           textfile_dir=args.textfile_dir)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    fails = [v for v in result["verdicts"] if v["outcome"] == "fail"]
    for v in fails:
        print(f"FAIL {v['check']}: {v['message']} -> {v['remediation']}", file=sys.stderr)
    na = sum(1 for r in result["checks"] if r["status"] != "ok" and not any(
        v["check"] == r["check"] and v["outcome"] == "fail" for v in result["verdicts"]))
    print(f"{result['outcome']}: {len(result['checks'])} checks, {len(fails)} failed verdicts, "
          f"{na} not applicable; {out / 'result.json'}", file=sys.stderr)
    return 0 if result["outcome"] == "PASS" else 1


def cmd_health(args: argparse.Namespace) -> int:
    from validation import health

    t0 = time.monotonic() - health.process_age_s()
    profile, sysroot = _profile(args)
    return health.main(profile, sysroot, _site(args.site), args.textfile_dir, args.drain, t0)


def _one_line_error(message: str) -> NoReturn:
    print(f"error: {message} (python -m validation health --help)", file=sys.stderr)
    sys.exit(2)


def cmd_checks(_: argparse.Namespace) -> int:
    from validation.checks.catalog import all_checks

    for spec in all_checks().values():
        needs = ",".join(spec.needs) or "-"
        print(f"{spec.name:22} needs={needs:28} levels={','.join(spec.levels):22} {spec.title}")
    return 0


def cmd_profiles(_: argparse.Namespace) -> int:
    from validation.profile import ProfileError, list_profiles, load_profile

    for name in list_profiles():
        try:
            p = load_profile(name)
        except ProfileError as exc:
            print(f"{name:26} INVALID: {exc}")
            continue
        sim = " (simulated)" if p.simulated else ""
        print(f"{name:26} {p.description}{sim}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m validation",
                                 description="rackready node-side validation suite")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run the checks and write DIR/result.json")
    run.add_argument("--profile", required=True, help="profile name or path to a .yml")
    run.add_argument("--level", required=True, choices=("quick", "standard", "burnin"))
    run.add_argument("--out", required=True,
                     help="run directory (an old one is moved aside, unless --resume)")
    run.add_argument("--sysroot", default="/", help="prefix for /proc and /sys reads")
    run.add_argument("--site", help="YAML of per-node settings: fabric, mtu, roce_priority, node")
    run.add_argument("--only", help="comma-separated check names")
    run.add_argument("--gpus", type=int, help="scope the profile to the first N GPUs "
                                              "(a VM slice); recorded in the result")
    run.add_argument("--without", help="needs the profile should not require here, "
                                       "e.g. rdma,nvme,raid; recorded in the result")
    run.add_argument("--resume", action="store_true",
                     help="continue the interrupted run in --out (same profile and level): "
                          "finished checks are kept, the burn-in continues where it stopped")
    run.add_argument("--textfile-dir", help="write node_exporter textfile metrics there "
                                            "(else the site's metrics: {textfile_dir}, else "
                                            "$RACKREADY_TEXTFILE_DIR)")
    run.set_defaults(fn=cmd_run)
    health = sub.add_parser("health", help="the hardware-only checks within 10 s: one line, "
                                           "exit 0 healthy / 1 unhealthy (a local gate, not "
                                           "an acceptance)")
    health.error = _one_line_error  # type: ignore[method-assign]  # one line, no usage
    health.add_argument("--profile", required=True, help="profile name or path to a .yml")
    health.add_argument("--gpus", type=int, help="scope the profile to the first N GPUs")
    health.add_argument("--without", help="needs the profile should not require here")
    health.add_argument("--sysroot", default="/", help="prefix for /proc and /sys reads")
    health.add_argument("--site", help="YAML of per-node settings, as for run")
    health.add_argument("--textfile-dir", help="write rackready-health.prom there "
                                               "(node_exporter textfile collector; else the "
                                               "site's metrics: {textfile_dir})")
    health.add_argument("--drain", action="store_true",
                        help="drain this node in Slurm when unhealthy (scontrol), resume it "
                             "when healthy and drained by rackready")
    health.set_defaults(fn=cmd_health)
    sub.add_parser("checks", help="list every check and what it needs").set_defaults(
        fn=cmd_checks)
    sub.add_parser("profiles", help="list the hardware profiles").set_defaults(fn=cmd_profiles)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
