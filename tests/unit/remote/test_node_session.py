"""rackready.remote.session against a misbehaving node: the in-process fake SSH node
(fake_node.py) runs the real remote commands (flock, setsid, sha256sum) on this machine
in temp folders, and a tiny bundle whose suite.py behaves as each test asks."""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from fake_node import FakeNode, finish

from rackready.remote import events as node_events
from rackready.remote import fetch, runner, session, ship
from rackready.sanitize import one_line, strip_control

SUITE = textwrap.dedent('''
    import json, os, subprocess, sys, time
    mode, *params = sys.argv[1].split(":")
    argv = sys.argv[2:]
    out, site = argv[argv.index("--out") + 1], argv[argv.index("--site") + 1]
    art = os.path.join(out, "artifacts")
    os.makedirs(art, exist_ok=True)

    def ev(**e):
        print(json.dumps(e), flush=True)

    def result():
        tmp = os.path.join(out, "result.json.tmp")
        with open(tmp, "w") as f:
            json.dump({"schema_version": "1.0", "outcome": "PASS", "cwd": os.getcwd(),
                       "site": open(site).read(), "env": os.environ.get("SUITE_ENV")}, f)
        os.replace(tmp, os.path.join(out, "result.json"))

    def write(rel, data):
        path = os.path.join(art, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    ev(event="run_started", run_id="r1", node="fake01", level="quick")
    if mode == "healthy":
        ev(event="check_started", check="a", needs=["gpu"])
        ev(event="progress", check="a", fraction=0.5, eta_s=1.5, label="half")
        ev(event="check_finished", check="a",
           result={"check": "a", "status": "ok", "duration_s": 0.1, "measurements": []})
        print("a plain line from the suite \\x1b[31mred\\x1b[0m", flush=True)
        print("suite warning on stderr", file=sys.stderr, flush=True)
        write("top.txt", b"top")
        write("sub/dir/log.txt", b"x" * 1000)
        result()
        ev(event="run_finished", outcome="PASS")
    elif mode == "garbage":
        for line in ("[]", '{"event": "progress", "fraction": "half"}',
                     '{"event": "progress", "check": "a", "fraction": NaN}',
                     '{"event": "measurement", "measurement": {"name": "x", "value": 1e999}}',
                     '{"event": "check_finished", "check": "a", "result": "ok"}',
                     '{"no_event": 1}', '{"event": "check_fin', "not json at all",
                     "x" * 5000):
            print(line, flush=True)
        sys.stdout.buffer.write(b'{"event": "progress", "fraction": 0.25, "label": "\\xff"}\\n')
        sys.stdout.flush()
        ev(event="check_started", check="b")
        result()
    elif mode == "stderr_flood":
        chunk = b"e" * 65535 + b"\\n"
        for _ in range(48):  # 3 MiB
            sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        ev(event="check_started", check="after-flood")
        result()
    elif mode == "silent":
        child = subprocess.Popen(["sleep", "60"])
        with open(os.path.join(out, "child.pid"), "w") as f:
            f.write(str(child.pid))
        time.sleep(60)
    elif mode == "chatty":
        while True:
            ev(event="progress", check="a", fraction=0.1, eta_s=None)
            time.sleep(0.05)
    elif mode == "events":
        for i in range(int(params[0])):
            ev(event="progress", check="a", fraction=0.5)
        result()
    elif mode == "no_result":
        print("Traceback: boom \\x1b[2J", file=sys.stderr)
        sys.exit(1)
    elif mode == "symlink":
        os.symlink("/etc/passwd", os.path.join(art, "passwd"))
        os.mkfifo(os.path.join(art, "fifo"))
        result()
    elif mode == "result_symlink":
        os.symlink("/etc/passwd", os.path.join(out, "result.json"))
    elif mode == "sizes":
        for i, size in enumerate(params):
            write(f"f{i}.bin", b"z" * int(size))
        result()
    elif mode == "deep":
        write("/".join(["d"] * 10) + "/deep.txt", b"deep")
        write("d/shallow.txt", b"ok")
        result()
    elif mode == "folders":
        for i in range(int(params[0])):
            os.makedirs(os.path.join(art, f"d{i:02d}"))
        result()
    elif mode == "braces":
        sys.stdout.write("{\\n" * int(params[0]))
        sys.stdout.flush()
        result()
    elif mode == "surrogate":
        ev(event="check_started", check="a\\ud800", needs=["\\udfff"])
        result()
    elif mode == "many":
        for i in range(int(params[0])):
            write(f"m{i:03d}.txt", b"m")
        result()
''')


def make_bundle(script: str = SUITE) -> tuple[bytes, str]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = script.encode()
        info = tarfile.TarInfo("suite.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tar_bytes = raw.getvalue()
    return gzip.compress(tar_bytes, mtime=0), hashlib.sha256(tar_bytes).hexdigest()


BUNDLE = make_bundle()


class Run:
    """One controller-side session against the fake node, with what it reported."""

    def __init__(self, fake: FakeNode, tmp: Path) -> None:
        self.fake, self.tmp = fake, tmp
        self.base = fake.root / "base"
        self.count = 0

    def __call__(self, mode: str, *, run_id: str | None = None, bundle=BUNDLE,
                 resume: bool = False, become: bool = False, **limits) -> session.SessionOutcome:
        self.count += 1
        self.run_id = run_id or f"run{self.count}"
        ctl = self.tmp / "ctl" / self.run_id
        self.files = session.NodeFiles(events=ctl / "events.jsonl", log=ctl / "node.log",
                                  result=ctl / "result.json", artifacts=ctl / "artifacts")
        self.events: list[dict] = []
        self.statuses: list[str] = []
        limits.setdefault("deadline_s", 20)
        limits.setdefault("idle_s", 10)
        limits.setdefault("kill_grace_s", 1)
        client = self.fake.connect()
        try:
            return session.run_on_node(
                client, "fake01", bundle=bundle, site_yaml="fabric: roce\n",
                command_args=[sys.executable, "suite.py", mode],
                env={"SUITE_ENV": "it's set", "PYTHONUNBUFFERED": "1"},
                remote_base=str(self.base), run_id=self.run_id, files=self.files,
                limits=session.Limits(**limits), on_event=self.events.append,
                on_status=self.statuses.append, resume=resume, become=become)
        finally:
            client.close()

    def log(self) -> str:
        return self.files.log.read_text()

    def local_files(self) -> list[str]:
        root = self.files.artifacts
        return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.fixture
def fake(tmp_path):
    node = FakeNode(tmp_path / "node")
    yield node
    node.close()


@pytest.fixture
def run(fake, tmp_path):
    return Run(fake, tmp_path)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


# -- a healthy node --------------------------------------------------------------------


def test_healthy_run_streams_events_and_fetches_result_and_artifacts(run):
    out = run("healthy")
    assert out.problem == "" and out.rc == 0
    assert out.result_fetched and out.bad_lines == 0
    assert out.events == 5 == len(run.events)
    assert [e["event"] for e in run.events][:2] == ["run_started", "check_started"]
    lines = run.files.events.read_text().splitlines()
    assert [json.loads(x) for x in lines] == run.events  # the original lines, in order
    assert sorted(out.fetched) == ["artifacts/sub/dir/log.txt", "artifacts/top.txt",
                                   "result.json"]
    assert (run.files.artifacts / "sub/dir/log.txt").read_bytes() == b"x" * 1000
    result = json.loads(run.files.result.read_text())
    # the suite ran from a freshly unpacked, verified bundle inside the run's folder
    assert result["cwd"].startswith(f"{run.base}/runs/run1/bundle.")
    assert result["site"] == "fabric: roce\n" and result["env"] == "it's set"
    log = run.log()
    assert "a plain line from the suite [31mred[0m" in log and "\x1b" not in log
    assert "suite warning on stderr" in log
    assert out.remote_dir == f"{run.base}/runs/run1" and out.shipped
    assert "running" not in run.statuses and "fetching results" in run.statuses


def test_bundle_is_shipped_once_per_hash(run, fake):
    assert run("healthy").problem == ""
    assert run("healthy").problem == ""
    cache = f"{run.base}/bundle/{BUNDLE[1]}.tar.gz"
    shipped = [p for p in fake.uploads if p.startswith(cache)]
    assert len(shipped) == 1
    assert Path(cache).read_bytes() == BUNDLE[0]


def test_tampered_bundle_on_the_node_is_detected_and_shipped_again(run, fake):
    assert run("healthy").shipped
    cache = run.base / "bundle" / f"{BUNDLE[1]}.tar.gz"
    # a valid archive with other content: only the hash tells them apart
    cache.write_bytes(make_bundle(SUITE.replace('"PASS"', '"FORGED"'))[0])
    out = run("healthy")
    assert out.problem == "" and out.shipped
    assert cache.read_bytes() == BUNDLE[0]
    assert json.loads(run.files.result.read_text())["outcome"] == "PASS"
    assert "does not match its sha256" in run.log()


def test_bundle_that_never_verifies_fails_the_node_in_one_line(run, fake):
    fake.corrupt_uploads = True
    out = run("healthy")
    assert out.problem == (f"the bundle on the node does not match sha256 {BUNDLE[1][:12]} "
                           "even after shipping it again")
    assert out.rc is None and not out.result_fetched and run.events == []


def test_held_lock_fails_the_node_without_waiting(run):
    run.base.mkdir(parents=True)
    with open(run.base / "suite.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        start = time.monotonic()
        out = run("healthy")
    assert out.problem == "another validation run holds the node's lock"
    assert time.monotonic() - start < 3
    assert not (run.base / "runs/run1/out").exists() and run.events == []
    assert run("healthy").problem == ""  # released: the next run goes ahead


def test_run_directory_is_created_exclusively(run):
    assert run("healthy", run_id="same").problem == ""
    out = run("healthy", run_id="same")
    assert out.problem == (f"remote run directory {run.base}/runs/same already exists "
                           "(a run id used twice)")
    assert run.events == []


def test_resume_needs_the_run_directory_and_reuses_it(run):
    out = run("healthy", run_id="r", resume=True)
    assert out.problem == f"nothing to resume: {run.base}/runs/r does not exist on the node"
    assert run("silent", run_id="r", idle_s=0.5).problem.startswith("stalled")
    out = run("healthy", run_id="r", resume=True)
    assert out.problem == "" and out.result_fetched


def test_unsafe_run_id_and_env_are_caller_errors(run):
    with pytest.raises(ValueError, match="run id"):
        run("healthy", run_id="../x")
    with pytest.raises(ValueError, match="digest"):
        run("healthy", bundle=(b"", "abc"))


def test_python_argument_and_resume_flag(run, fake):
    client = fake.connect()
    files = session.NodeFiles(*(run.tmp / n for n in ("e", "l", "r", "a")))
    kw = dict(bundle=BUNDLE, site_yaml="", env={}, remote_base=str(run.base), files=files,
              limits=session.Limits(deadline_s=10), on_event=lambda e: None,
              on_status=lambda s: None)
    try:
        out = session.run_on_node(client, "fake01", python=sys.executable,
                             command_args=["suite.py", "healthy"], run_id="py", **kw)
        assert out.problem == "" and out.result_fetched
        with pytest.raises(ValueError, match="resume=True"):
            session.run_on_node(client, "fake01", command_args=["x", "--resume"], run_id="r", **kw)
    finally:
        client.close()


def test_ship_bundle_returns_the_verified_unpacked_folder(run, fake):
    client = fake.connect()
    try:
        folder = session.ship_bundle(client, BUNDLE, remote_base=str(run.base), run_id="job")
        assert folder.startswith(f"{run.base}/runs/job/bundle.")
        assert (Path(folder) / "suite.py").read_text() == SUITE
        with pytest.raises(session.SessionError, match="already exists"):
            session.ship_bundle(client, BUNDLE, remote_base=str(run.base), run_id="job")
    finally:
        client.close()


# -- hostile file names and file kinds --------------------------------------------------


def test_traversal_absolute_and_control_names_are_refused(run, fake, tmp_path):
    art = str(run.base / "runs/run1/out/artifacts")
    fake.fake_entries[art] = {"../../x": b"pwned", "/tmp/x": b"pwned", "a\x1b[2Jb": b"esc",
                              "..": b"dots", "n" * 300: b"long", "ok.txt": b"fine"}
    out = run("healthy")
    assert "artifacts/ok.txt" in out.fetched
    refused = "\n".join(out.refused)
    assert "'../../x': unsafe name (contains '/')" in refused
    assert "'/tmp/x': unsafe name (contains '/')" in refused
    assert "'a\\x1b[2Jb': unsafe name (contains control characters)" in refused
    assert "unsafe name (longer than 255 bytes)" in refused
    assert out.problem.startswith("refused artifact '../../x': unsafe name")
    assert not any(p.name == "x" for p in tmp_path.rglob("x"))
    assert "\x1b" not in out.problem and "\x1b" not in run.log()
    assert all(p.resolve().is_relative_to(run.files.artifacts.resolve())
               for p in run.files.artifacts.rglob("*"))


def test_symlinks_and_fifos_are_refused_not_followed(run):
    out = run("symlink")
    assert "'passwd': a symlink (not followed)" in out.refused
    assert "'fifo': a fifo" in out.refused
    assert run.local_files() == []
    assert out.result_fetched


def test_result_json_that_is_a_symlink_is_refused(run):
    out = run("result_symlink")
    assert not out.result_fetched and not run.files.result.exists()
    assert "'result.json': a symlink (not followed)" in out.refused
    assert out.problem == "no result.json (validation exited 0)"


def test_over_cap_files_are_refused_and_leave_nothing(run):
    out = run("sizes:500:5000:400:400", max_file_bytes=1000, max_total_bytes=1400)
    result = run.files.result.stat().st_size
    assert 150 < result < 300
    # result.json + f0 (500) + f2 (400) fit; f1 is over the per-file cap;
    # f3 would pass 1400 in total
    assert out.refused == ["'f1.bin': larger than the per-file cap of 1000 bytes",
                           "'f3.bin': over the total cap of 1400 bytes per node"]
    assert run.local_files() == ["f0.bin", "f2.bin"]
    assert not list(run.files.result.parent.rglob("*.part-*"))


def test_file_growing_past_its_listed_size_is_cut_at_the_cap(run, fake):
    # the listing says 10 bytes, the file has 5000: reading stops at the cap
    art = str(run.base / "runs/run1/out/artifacts")
    fake.fake_entries[art] = {"liar.bin": b"L" * 5000}
    fake.listed_sizes["liar.bin"] = 10
    out = run("healthy", max_file_bytes=1000)
    assert "'liar.bin': larger than the per-file cap of 1000 bytes" in out.refused
    assert "liar.bin" not in run.local_files()
    assert not list(run.files.artifacts.rglob("*.part-*"))


def test_unreadable_artifacts_are_refused_and_the_rest_fetched(run, fake):
    art = run.base / "runs/run1/out/artifacts"
    fake.denied |= {str(art / "top.txt"), str(art / "sub/dir")}
    out = run("healthy")
    assert out.refused == [f"'sub/dir': cannot list {art}/sub/dir: Permission denied",
                           f"'top.txt': cannot read {art}/top.txt: Permission denied"]
    assert out.result_fetched and run.local_files() == []
    assert out.problem.startswith("refused artifact 'sub/dir': cannot list ")


def test_depth_and_entry_count_are_capped(run):
    out = run("deep")
    assert "artifacts/d/shallow.txt" in out.fetched
    assert any("deeper than 8 levels" in r for r in out.refused)
    out = run("many:20", max_files=5)
    assert len([f for f in out.fetched if f.startswith("artifacts/")]) == 5
    assert out.refused == ["'*': more than 5 entries: the rest not fetched"]


def test_missing_result_json_leaves_no_empty_file(run):
    out = run("no_result")
    assert out.rc == 1 and not out.result_fetched
    assert not run.files.result.exists()
    assert not list(run.files.result.parent.glob("*result.json*"))
    assert out.problem == "no result.json (validation exited 1): Traceback: boom [2J"


def test_missing_program_is_one_line(run):
    client = run.fake.connect()
    files = session.NodeFiles(*(run.tmp / n for n in ("e", "l", "r", "a")))
    try:
        out = session.run_on_node(client, "fake01", bundle=BUNDLE, site_yaml="", env={},
                             command_args=["/nonexistent/python", "-m", "validation"],
                             remote_base=str(run.base), run_id="nop", files=files,
                             limits=session.Limits(deadline_s=10), on_event=print,
                             on_status=lambda s: None)
    finally:
        client.close()
    assert out.problem == ("no result.json (validation exited 127): /nonexistent/python "
                           "not found on the node; provision it first")


# -- hostile streams ------------------------------------------------------------------


def test_malformed_event_lines_are_counted_and_never_passed_on(run):
    out = run("garbage", max_line_bytes=1024)
    # [], "half", NaN, 1e999, result "ok", no "event", a torn line, an over-long line,
    # a line that is not UTF-8
    assert out.bad_lines == 9
    assert out.problem == "sent 9 malformed event lines"
    assert [e["event"] for e in run.events] == ["run_started", "check_started"]
    assert out.events == 2 == len(run.files.events.read_text().splitlines())
    log = run.log()
    assert "not json at all" in log and "x" * 2000 not in log
    assert "field 'fraction' has the wrong type" in log and "non-finite number NaN" in log


def test_event_and_stream_caps_stop_the_node(run):
    out = run("events:50", max_events=10)
    assert out.problem == "sent more than 10 events" and out.events == 10
    out = run("events:500", max_stream_bytes=4096)
    assert out.problem == "sent more than 4 KiB on stdout"


def test_megabytes_on_stderr_do_not_deadlock_and_are_capped(run):
    start = time.monotonic()
    out = run("stderr_flood", max_stderr_bytes=1 << 20)
    assert time.monotonic() - start < 10
    assert out.problem == "" and out.result_fetched
    assert run.events[-1]["check"] == "after-flood"
    assert out.dropped_log_bytes == 3 * (1 << 20) - (1 << 20)
    assert run.files.log.stat().st_size < (1 << 20) + 10_000


def test_silent_node_ends_at_idle_timeout_and_its_process_group_is_killed(run):
    start = time.monotonic()
    out = run("silent", idle_s=0.6)
    assert out.problem == "stalled: no output for 0.6 s"
    assert out.rc is None and time.monotonic() - start < 5
    rdir = run.base / "runs/run1"
    pgid = int((rdir / "pgid").read_text())
    child = int((rdir / "out/child.pid").read_text())
    deadline = time.monotonic() + 2
    while (_alive(pgid) or _alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pgid) and not _alive(child)
    assert "suite's process group stopped (SIGTERM)" in run.log()


def test_chatty_node_ends_at_its_deadline(run):
    start = time.monotonic()
    out = run("chatty", deadline_s=1.5, idle_s=5)
    assert out.problem == "deadline of 1.5 s passed"
    assert 1.4 < time.monotonic() - start < 5
    assert out.events > 3 and not out.result_fetched


def test_connection_lost_mid_run_is_one_line(tmp_path):
    def hook(command: str, channel) -> bool:
        if "flock" not in command:
            return False
        channel.sendall(b'{"event": "run_started", "node": "fake01"}\n')
        time.sleep(0.2)
        fake.drop_connections()
        return True

    fake = FakeNode(tmp_path / "node", exec_hook=hook)
    try:
        out = Run(fake, tmp_path)("healthy")
    finally:
        fake.close()
    assert out.problem.startswith("connection lost: ")
    assert out.events == 1 and out.rc is None


def test_exit_status_without_eof_still_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "EXIT_GRACE_S", 0.3)

    def hook(command: str, channel) -> bool:
        if "flock" not in command:
            return False
        channel.sendall(b'{"event": "run_started"}\n')
        channel.send_exit_status(0)  # no EOF: a leftover child holds stdout
        time.sleep(3)
        finish(channel, 0)
        return True

    fake = FakeNode(tmp_path / "node", exec_hook=hook)
    try:
        start = time.monotonic()
        out = Run(fake, tmp_path)("healthy")
    finally:
        fake.close()
    assert out.rc == 0 and time.monotonic() - start < 2.5
    assert out.problem == "no result.json (validation exited 0)"


# -- errors reported as what they are --------------------------------------------------


def test_sftp_permission_denied_is_not_a_lost_connection(run, fake):
    fake.deny_writes = True
    out = run("healthy")
    assert out.problem.startswith(f"cannot write {run.base}/bundle/{BUNDLE[1]}.tar.gz.part-")
    assert out.problem.endswith(": Permission denied")


def test_a_local_write_failure_is_the_controllers_not_a_lost_connection(run, monkeypatch):
    """The controller's own disk (a folder where result.json goes, a full disk) fails the
    fetch with what happened there, never "connection lost"."""
    real = fetch.os.replace

    def replace(src, dst):
        if Path(dst).name == "result.json":
            raise IsADirectoryError(21, "Is a directory")
        return real(src, dst)

    monkeypatch.setattr(fetch.os, "replace", replace)
    out = run("healthy")
    assert out.problem == f"cannot write {run.files.result} on the controller: Is a directory"
    assert "connection lost" not in out.problem


def test_failed_mkdir_is_reported_as_such(run):
    run.base.parent.mkdir(parents=True, exist_ok=True)
    run.base.write_text("a file where the base folder should be")
    out = run("healthy")
    assert out.problem == f"cannot create {run.base}: Not a directory"


def test_become_goes_through_sudo_and_stages_uploads(tmp_path):
    shim = tmp_path / "bin"
    shim.mkdir()
    calls = tmp_path / "sudo.log"
    (shim / "sudo").write_text(
        f'#!/bin/sh\n[ "$1" = -n ] && shift\n[ "$1" = -- ] && shift\n'
        f'echo "$*" >> {calls}\nexec "$@"\n')
    (shim / "sudo").chmod(0o755)
    fake = FakeNode(tmp_path / "node", env={"PATH": f"{shim}:{os.environ['PATH']}"})
    fake.allowed.append("/tmp/rackready.")  # the login user's staging folders
    try:
        run = Run(fake, tmp_path)
        out = run("healthy", become=True)
    finally:
        fake.close()
    assert out.problem == "" and out.result_fetched
    staged = [p for p in fake.uploads if not p.startswith(str(fake.root))]
    assert staged and all(p.startswith("/tmp/rackready.") for p in staged)
    assert not any(Path(p).parent.exists() for p in staged)  # the staging folder is gone
    assert "install -m 0644" in calls.read_text() and "flock -n" in calls.read_text()


# -- the pieces ------------------------------------------------------------------------


def test_build_remote_command_wraps_sudo_in_one_place():
    script = "echo 'it''s'; exit 3"
    plain = runner.build_remote_command(script)
    become = runner.build_remote_command(script, become=True)
    assert plain == "sh -c 'export LC_ALL=C; echo '\"'\"'it'\"'\"''\"'\"'s'\"'\"'; exit 3'"
    assert become == "sudo -n -- " + plain
    suite = ship.build_suite_script(command_args=["/opt/v/bin/python", "-m", "validation"],
                                  env={"A": "b c"}, bundle_dir="/b/bundle.1", lock="/b/l",
                                  pgid_file="/b/pgid", out="/b/out", site="/b/site.yml")
    assert suite == (
        "umask 022; cd /b/bundle.1 || exit 3; command -v /opt/v/bin/python >/dev/null 2>&1 || "
        "{ echo '/opt/v/bin/python not found on the node; provision it first' >&2; exit 127; }; "
        "exec flock -n -E 75 /b/l setsid -w sh -c 'echo $$ > \"$0\" && exec \"$@\"' /b/pgid "
        "env 'A=b c' /opt/v/bin/python -m validation --out /b/out --site /b/site.yml")
    with pytest.raises(ValueError):
        ship.build_suite_script(command_args=["x"], env={"A;rm": "1"}, bundle_dir="/b",
                              lock="/l", pgid_file="/p", out="/o", site="/s")


@pytest.mark.parametrize("name,why", [
    ("ok.txt", ""), ("", "empty"), (".", "is '.'"), ("..", "is '..'"),
    ("a/b", "contains '/'"), ("a\x00b", "contains NUL"),
    ("a\nb", "contains control characters"), ("a\u202eb", "contains control characters"),
    ("é" * 128, "longer than 255 bytes"), ("é" * 127, ""),
])
def test_unsafe_name(name, why):
    assert fetch.unsafe_name(name) == why


@pytest.mark.parametrize("event,ok", [
    ({"event": "progress", "fraction": 0.5, "eta_s": None}, True),
    ({"event": "progress", "fraction": True}, False),
    ({"event": "progress", "fraction": 1.5}, False),
    ({"event": "progress"}, False),
    ({"event": "check_finished", "check": "a", "result": {"duration_s": "1"}}, False),
    ({"event": "check_started", "check": "a", "needs": "gpu"}, False),
    ({"event": "some_future_event", "anything": [1]}, True),
    ({"event": 3}, False), ([], False), ("x", False),
])
def test_event_problem(event, ok):
    assert (node_events.event_problem(event) == "") is ok


def test_limits_per_level():
    assert session.Limits.for_level("quick").deadline_s == 600
    assert session.Limits.for_level("standard").deadline_s == 1800
    assert session.Limits.for_level("burnin", idle_s=60).deadline_s == 12 * 3600


def test_strip_control_keeps_newlines_and_tabs():
    assert strip_control("a\x1b[2Jb\r\n\tc\x00\x7f\x85\u202ed") == "a[2Jb\n\tcd"
    assert one_line("x\ny\x07 " + "z" * 300, 20) == "x y " + "z" * 15 + "…"


# -- the real suite ----------------------------------------------------------------------


def test_real_bundle_and_suite_run_through_the_session(tmp_path):
    """The shipped validation bundle, verified and unpacked on the node, runs the real
    `python -m validation run` (against a simulated node) under flock and setsid."""
    import yaml
    from hwsim_node import make_node

    from rackready.remote import bundle
    from rackready.site.inventory import provisioned

    sim = make_node(tmp_path / "sim", "xe9680-h200", "gpu01", "roce")
    env = {k: v for k, v in sim.env().items() if k != "PYTHONPATH"}  # the bundle's own code
    fake = FakeNode(tmp_path / "node", env=env)
    payload, digest = bundle.build()
    files = session.NodeFiles(*(tmp_path / "ctl" / n for n in
                           ("events.jsonl", "node.log", "result.json", "artifacts")))
    events: list[dict] = []
    client = fake.connect()
    try:
        out = session.run_on_node(
            client, "gpu01", bundle=(payload, digest),
            # as the controller ships it: the role variables that provisioned the node
            site_yaml=yaml.safe_dump({**provisioned({}, Path("roles")), "fabric": "roce",
                                      "node": "gpu01"}),
            command_args=[sys.executable, "-m", "validation", "run", "--profile",
                          "xe9680-h200-lab", "--level", "quick", "--sysroot",
                          str(sim.sysroot), "--only", "kernel.cmdline"],
            env={"RACKREADY_BUNDLE_SHA256": digest, "PYTHONUNBUFFERED": "1"},
            remote_base=str(fake.root / "base"), run_id="real", files=files,
            limits=session.Limits(deadline_s=60, idle_s=30), on_event=events.append,
            on_status=lambda s: None)
    finally:
        client.close()
        fake.close()
    assert out.problem == "" and out.result_fetched, out.problem
    result = json.loads(files.result.read_text())
    assert result["bundle_sha256"] == digest and result["node"] == "gpu01"
    assert [e["event"] for e in events][0] == "run_started"
    assert events[-1] == {**events[-1], "event": "run_finished"}
    assert {c["check"] for c in result["checks"]} == {"kernel.cmdline"}


# -- bounded in time and size whatever the node does ---------------------------------


def test_listing_folders_obeys_the_fetch_deadline(run, fake):
    """12 empty folders, each listing answered late: the fetch deadline holds while
    listing (not only while reading files) and is the recorded problem."""
    fake.list_delay = 0.4
    start = time.monotonic()
    out = run("folders:12", fetch_s=1.5)
    took = time.monotonic() - start
    assert out.problem == "fetching results took longer than 1.5 s"
    assert took < 4, took  # 13 listings at 0.4 s would be 5.2 s of fetching


def test_malformed_line_notes_are_summarized_within_the_log_budget(run):
    out = run("braces:20000", max_stderr_bytes=4096)
    assert out.bad_lines == 20000 and out.problem == "sent 20000 malformed event lines"
    log = run.log()
    assert log.count("bad event line (") == 20  # the first few, then a count
    assert "19980 more bad event lines not logged" in log
    assert run.files.log.stat().st_size < 20_000


def test_lone_surrogates_in_an_event_are_escaped_before_it_is_passed_on(run):
    out = run("surrogate")
    assert out.problem == "" and out.bad_lines == 0
    started = next(e for e in run.events if e["event"] == "check_started")
    assert started["check"] == "a\\ud800" and started["needs"] == ["\\udfff"]
    json.dumps(run.events).encode("utf-8")  # every text is writable now


def _flood(stream: str, size: int, trickle_s: float = 0.0):
    def hook(command: str, channel) -> bool:
        send = channel.sendall if stream == "stdout" else channel.sendall_stderr
        try:
            if trickle_s:
                for _ in range(size):
                    send(b".")
                    time.sleep(trickle_s)
            else:
                for _ in range(size >> 16):
                    send(b"x" * (1 << 16))
        except (OSError, EOFError):  # the controller closed the channel: stopped
            return True
        finish(channel, 0)
        return True
    return hook


@pytest.mark.parametrize("stream, size, trickle_s, problem", [
    ("stdout", 4 << 20, 0.0, "sent more than 64 KiB on stdout"),
    ("stderr", 3 << 20, 0.0, "sent more than 64 KiB on stderr (3080192 bytes not kept)"),
    ("stdout", 100, 0.3, "no end within 1.5 s"),
])
def test_run_command_is_bounded_in_bytes_and_time(tmp_path, stream, size, trickle_s, problem):
    node = FakeNode(tmp_path / "node", exec_hook=_flood(stream, size, trickle_s))
    client = node.connect()
    try:
        start = time.monotonic()
        res = runner.run_command(client, "anything", timeout_s=1.5, idle_s=1,
                             max_stdout=64 << 10, max_stderr=64 << 10)
        assert time.monotonic() - start < 5
    finally:
        client.close()
        node.close()
    assert res.problem == problem
    assert len(res.out) <= 64 << 10 and len(res.err) <= (64 << 10) + 5000
