"""The controller's cost per node: `invoke validate` over 1 to 256 simulated nodes.

    .venv/bin/python bench/controller_scale.py [--max-nodes 256] [--out bench/results/x.md]

Each size runs the real controller path (rackready.steps.validate.run_validation: plan,
one SSH session per node, at most 32 at once, through rackready.remote.session; judge;
JSON reports) against in-process SSH nodes (tests/unit/fake_node.py), in a process of
their own so what is measured is the controller alone. The node side does trivial work:
its "suite" (a shell script in place of the node venv's python) replays a real result
(tests/fixtures/h200x2-quick-result.json.gz: 27 checks, 677 measurements, 19 artifacts)
named for the node, with this run's nonce and bundle hash, streaming its events. The
bundle shipped is the real one. The rack-level step is left out: its workload is one
job across all nodes, not a cost per node (docs/scale.md).

Every size runs in a fresh controller process (peak RSS is a high-water mark) and a
fresh set of nodes (the bundle is shipped to each, as on a new rack). A background
sampler records open file descriptors (/proc/self/fd) and threads every 10 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gzip
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "unit"))  # the fake SSH node the unit tests use

FIXTURE = REPO / "tests" / "fixtures" / "h200x2-quick-result.json.gz"
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PROFILE = "xe9680-h200"  # the fixture's profile
SAMPLE_S = 0.01

# --- the node side ------------------------------------------------------------------------

# The node venv's "python": replays the prepared result as this node's, then exits 0.
# The controller's suite command ends in `--out R/out --site R/site.yml`; the site file
# names the node (`node: NAME`), the environment carries the nonce and the bundle hash.
STUB = """#!/bin/sh
while [ $# -gt 0 ]; do
  case $1 in --out) out=$2; shift;; --site) site=$2; shift;; esac; shift
done
node=$(sed -n 's/^node: //p' "$site")
subst="s/@NODE@/$node/g; s/@NONCE@/$RACKREADY_RUN_NONCE/g; s/@BUNDLE@/$RACKREADY_BUNDLE_SHA256/g"
mkdir -p "$out" && cp -R {suite}/artifacts "$out/artifacts" || exit 1
sed "$subst" {suite}/events.jsonl
sed "$subst" {suite}/result.json > "$out/result.json.tmp" &&
  mv "$out/result.json.tmp" "$out/result.json"
"""


def prepare_suite(folder: Path, level: str) -> Path:
    """The replayed suite: result.json and events.jsonl with placeholders, the artifacts
    the result cites, and the stub python; returns the venv folder the nodes name."""
    from rackready.decide.node import expected_checks

    suite = folder / "suite"
    result = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    # checks of the level newer than the capture: skipped (the node fails, fully judged)
    have = {c["check"] for c in result["checks"]}
    result["checks"] += [{"check": name, "status": "skipped", "duration_s": 0.0,
                          "measurements": [], "message": "not in the replayed capture"}
                         for name in expected_checks(level, None) if name not in have]
    result["level"] = level
    # every node's GPUs are its own (one serial on two nodes makes both INCOMPLETE)
    for check in result["checks"]:
        for m in check["measurements"]:
            if m["name"] in ("gpu.serial", "gpu.uuid"):
                m["value"] = f"@NODE@-{m['value']}"
    cited = set(result.get("artifacts") or {}) | {
        m["artifact"] for c in result["checks"] for m in c["measurements"] if m.get("artifact")}
    result["artifacts"] = {}
    for rel in sorted(cited):
        data = f"artifact {rel} (replayed by bench/controller_scale.py)\n".encode()
        path = suite / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        result["artifacts"][rel] = hashlib.sha256(data).hexdigest()
    result.update(node="@NODE@", nonce="@NONCE@", bundle_sha256="@BUNDLE@")
    (suite / "result.json").write_text(json.dumps(result))
    (suite / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in _events(result)))
    venv = folder / "venv"
    (venv / "bin").mkdir(parents=True)
    stub = venv / "bin" / "python"
    stub.write_text(STUB.format(suite=suite))
    stub.chmod(0o755)
    return venv


def _events(result: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """What the real suite streams for that result: each check's start, measurements and end."""
    yield {"event": "run_started", "run_id": result["run_id"], "node": "@NODE@",
           "profile": result["profile"], "level": result["level"], "simulated": False}
    for check in result["checks"]:
        yield {"event": "check_started", "check": check["check"], "needs": check.get("needs", [])}
        for m in check["measurements"]:
            yield {"event": "measurement", "check": check["check"], "measurement": m}
        yield {"event": "check_finished", "check": check["check"], "result": check}
    yield {"event": "run_finished", "outcome": result["outcome"]}


def serve(n: int, folder: Path) -> None:
    """`--serve N FOLDER`: N fake SSH nodes; one JSON line of how to reach them, then
    serve until stdin closes."""
    from fake_node import FakeNode

    fakes = [FakeNode(folder / f"node{i:03d}") for i in range(n)]
    print(json.dumps([{"port": f.node.port, "key_file": f.node.key_file,
                       "known_hosts": f.node.known_hosts, "root": str(f.root)}
                      for f in fakes]), flush=True)
    sys.stdin.read()
    for f in fakes:
        f.close()


@contextlib.contextmanager
def node_host(n: int, folder: Path) -> Iterator[list[dict[str, Any]]]:
    """The nodes, in a process of their own (their threads and sockets are not the
    controller's)."""
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(n), str(folder)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdin is not None and proc.stdout is not None
    try:
        yield json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


# --- the controller side ------------------------------------------------------------------

class Sampler:
    """Peak open file descriptors and threads of this process, sampled in the background."""

    def __init__(self) -> None:
        self.fds = self.threads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-sampler")

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(SAMPLE_S):
                return

    def sample(self) -> None:
        self.fds = max(self.fds, open_fds())
        self.threads = max(self.threads, threading.active_count() - 1)  # not the sampler


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def measure(n: int, folder: Path, level: str = "quick", formats: str = "json",
            only: str | None = None) -> dict[str, Any]:
    """One validate run over n fresh nodes; its costs as one row of the table. only:
    narrow the run (`--only`), for the unit test that keeps this program working."""
    from rackready.remote import session as node_session
    from rackready.site.inventory import Node
    from rackready.steps import validate

    venv = prepare_suite(folder, level)
    with node_host(n, folder / "nodes") as reach:
        nodes = [Node(name=f"gpu{i:03d}", address="127.0.0.1", profile=PROFILE,
                      platform="xe9680", fabric="ib", user="tester", port=r["port"],
                      key_file=r["key_file"], known_hosts=r["known_hosts"], sysroot="/",
                      lab=True, validation_without=("bmc",),
                      provisioned={"validation_tools_venv": str(venv)})
                 for i, r in enumerate(reach)]
        # NODE_BASE is one path for every node; each fake node has its own folder for it
        bases = {node.name: f"{r['root']}/base" for node, r in zip(nodes, reach, strict=True)}
        # wall and controller CPU seconds of the phases run on the main thread
        phases: dict[str, float] = {"judge": 0.0, "reports": 0.0, "judge_cpu": 0.0,
                                    "reports_cpu": 0.0}
        spans: list[tuple[float, float]] = []
        marks: dict[str, float] = {}  # process CPU when the first session / judging began
        real_session, real_run_node = node_session.run_on_node, validate._run_node
        real_judge, real_reports = validate.judge_run, validate._reports

        def run_on_node(client, name, **kw):
            return real_session(client, name, **{**kw, "remote_base": bases[name]})

        def run_node(*args, **kw):
            marks.setdefault("sessions", cpu_s())
            t = time.monotonic()
            try:
                return real_run_node(*args, **kw)
            finally:
                spans.append((t, time.monotonic()))

        def timed(key, fn):
            def call(*args, **kw):
                marks.setdefault(key, cpu_s())
                t, c = time.monotonic(), cpu_s()
                try:
                    return fn(*args, **kw)
                finally:
                    phases[key] += time.monotonic() - t
                    phases[f"{key}_cpu"] += cpu_s() - c
            return call

        patches = [
            mock.patch.object(validate, "_load", lambda inv: nodes),
            mock.patch.object(node_session, "run_on_node", run_on_node),
            mock.patch.object(validate, "_run_node", run_node),
            mock.patch.object(validate, "judge_run", timed("judge", real_judge)),
            mock.patch.object(validate, "_reports", timed("reports", real_reports)),
            # the rack step is one job across all nodes, not a cost per node
            mock.patch.object(validate.rack_step, "run_rack_step", lambda *a, **k: {}),
        ]
        out = folder / "run"
        fds0, threads0, rss0 = open_fds(), threading.active_count() - 1, rss_mib()
        cpu0, children0 = cpu_s(), cpu_s(resource.RUSAGE_CHILDREN)
        with contextlib.ExitStack() as stack, Sampler() as sampler:
            for p in patches:
                stack.enter_context(p)
            devnull = stack.enter_context(open(os.devnull, "w"))
            stack.enter_context(contextlib.redirect_stdout(devnull))
            t0 = time.monotonic()
            validate.run_validation(node=None, inventory="bench", level=level, out=str(out),
                                    formats=formats, only=only)
            wall = time.monotonic() - t0
        sampler.sample()
        cpu = cpu_s() - cpu0
    outcomes: dict[str, int] = {}
    integrity = 0
    for node in nodes:
        j = json.loads((out / node.name / "judgement.json").read_text())
        outcomes[j["outcome"]] = outcomes.get(j["outcome"], 0) + 1
        integrity += len(j["integrity"])
    sessions = max(e for _, e in spans) - min(s for s, _ in spans)
    return {"nodes": n, "wall_s": wall, "wall_per_node_s": wall / n,
            "plan_s": min(s for s, _ in spans) - t0, "sessions_s": sessions,
            "session_s": sum(e - s for s, e in spans) / n,
            "judge_s": phases["judge"], "reports_s": phases["reports"],
            "plan_cpu_s": marks["sessions"] - cpu0,
            "sessions_cpu_s": marks["judge"] - marks["sessions"],
            "judge_cpu_s": phases["judge_cpu"], "reports_cpu_s": phases["reports_cpu"],
            "load": os.getloadavg()[0],
            "cpu_s": cpu, "cpu_per_node_s": cpu / n,
            "node_cpu_s": cpu_s(resource.RUSAGE_CHILDREN) - children0,
            "rss0_mib": rss0, "peak_rss_mib": resource.getrusage(
                resource.RUSAGE_SELF).ru_maxrss / 1024,
            "fds0": fds0, "peak_fds": sampler.fds, "fds_after": open_fds(),
            "threads0": threads0, "peak_threads": sampler.threads,
            "outcomes": outcomes, "integrity_findings": integrity}


# --- the table ----------------------------------------------------------------------------

COLUMNS = (  # heading, key, format
    ("nodes", "nodes", "{}"), ("wall s", "wall_s", "{:.1f}"),
    ("wall/node s", "wall_per_node_s", "{:.3f}"), ("plan s", "plan_s", "{:.2f}"),
    ("sessions s", "sessions_s", "{:.1f}"), ("one session s", "session_s", "{:.2f}"),
    ("judge s", "judge_s", "{:.1f}"), ("reports s", "reports_s", "{:.1f}"),
    ("ctl CPU/node s", "cpu_per_node_s", "{:.2f}"),
    ("plan CPU/node", "plan_cpu_per_node", "{:.3f}"),
    ("sessions CPU/node", "sessions_cpu_per_node", "{:.3f}"),
    ("judge CPU/node", "judge_cpu_per_node", "{:.2f}"),
    ("reports CPU/node", "reports_cpu_per_node", "{:.2f}"),
    ("node-side CPU s", "node_cpu_s", "{:.1f}"),
    ("peak RSS MiB", "peak_rss_mib", "{:.0f}"), ("RSS/node MiB", "rss_per_node", "{:.2f}"),
    ("peak fds", "peak_fds", "{}"), ("fds after", "fds_after", "{}"),
    ("peak threads", "peak_threads", "{}"), ("load avg", "load", "{:.1f}"),
    ("outcomes", "outcomes_text", "{}"))


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(h for h, _, _ in COLUMNS) + " |",
             "|" + "|".join(" ---: " for _ in COLUMNS) + "|"]
    for r in rows:
        per_node = {f"{k}_cpu_per_node": r[f"{k}_cpu_s"] / r["nodes"]
                    for k in ("plan", "sessions", "judge", "reports")}
        shown = {**r, **per_node,
                 "rss_per_node": (r["peak_rss_mib"] - r["rss0_mib"]) / r["nodes"],
                 "outcomes_text": ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))}
        lines.append("| " + " | ".join(f.format(shown[k]) for _, k, f in COLUMNS) + " |")
    return "\n".join(lines)


def one_size(n: int, level: str, formats: str) -> dict[str, Any]:
    """A size in a fresh controller process (peak RSS is the process's high-water mark)."""
    proc = subprocess.run([sys.executable, __file__, "--one", str(n), "--level", level,
                           "--formats", formats], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    if proc.returncode:
        raise SystemExit(f"{n} nodes: the run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def versions() -> str:
    import paramiko

    os_name = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    return (f"{os_name}, {os.cpu_count()} cores, kernel {platform.release()}; "
            f"Python {platform.python_version()}, paramiko {paramiko.__version__}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-nodes", type=int, default=SIZES[-1],
                    help="the largest size measured (the upper ones take minutes)")
    ap.add_argument("--level", default="quick")
    ap.add_argument("--formats", default="json", help="report formats written by the run")
    ap.add_argument("--out", type=Path, help="also write the table here (markdown)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, a JSON line
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)  # the node host
    args = ap.parse_args(argv)
    if args.serve:
        serve(int(args.serve[0]), Path(args.serve[1]))
        return 0
    if args.one:
        folder = Path(tempfile.mkdtemp(prefix="controller-scale-"))
        try:
            print(json.dumps(measure(args.one, folder, args.level, args.formats)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return 0
    rows = []
    for n in (s for s in SIZES if s <= args.max_nodes):
        rows.append(one_size(n, args.level, args.formats))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # each size as it ends
    text = table(rows)
    print(text)
    if args.out:
        when = dt.date.today().isoformat()
        args.out.write_text(f"machine: {versions()}\ndate: {when}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
