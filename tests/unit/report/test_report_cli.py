"""CLI exit codes: 0 done, 1 not PASS / verification failed, 2 a person's mistake (one line)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_synthetic import healthy_and_faulty, result, write_run

from rackready.report.cli import main
from rackready.report.seal.signing import PASSPHRASE_ENV
from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
pytestmark = pytest.mark.integration  # the command line as real processes


def run_cli(*argv: str, env: dict[str, str] | None = None,
            module: str = "rackready.report") -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != PASSPHRASE_ENV}
    return subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True,
                          check=False, cwd=ROOT, env={**full_env, **(env or {})}, timeout=120)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_build_summary_keygen_sign_verify(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = healthy_and_faulty(tmp_path / "run")
    assert main(["build", "--run", str(run), "--formats", "json,html,junit"]) == 0
    assert "gpu02  FAIL" in capsys.readouterr().out
    assert main(["summary", "--run", str(run)]) == 1
    key = tmp_path / "op.key"
    assert main(["keygen", "--out", str(key)]) == 0
    assert "fingerprint SHA256:" in capsys.readouterr().out
    assert main(["sign", "--report", str(run), "--operator", "Dana Tech", "--key", str(key)]) == 0
    assert "Dana Tech" in (run / "report" / "node-gpu01.html").read_text()
    capsys.readouterr()
    assert main(["verify", "--report", str(run / "report"), "--pubkey", f"{key}.pub"]) == 0
    out = capsys.readouterr().out.splitlines()
    # first what the folder claims to be, so two racks' folders are told apart
    assert "rack report of run run-20261130-1200, inventory lab" in out[0]
    assert "signed by Dana Tech" in out[0]
    out = out[1:]
    assert out[0].startswith("rack.json") and " OK " in out[0]
    assert out[-1].startswith("8 of 8 files verify with key SHA256:")
    rep = run / "report" / "node-gpu01.json"
    doc = json.loads(rep.read_text())
    doc["signoff"]["name"] = "Mallory"
    rep.write_text(json.dumps(doc))
    assert main(["verify", "--report", str(run / "report"), "--pubkey", f"{key}.pub"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^node-gpu01.json +FAILED +signature does not verify", out, re.M)
    assert out.splitlines()[-1].endswith("; 1 FAILED")


def test_summary_of_a_passing_run_exits_zero(tmp_path: Path) -> None:
    assert main(["summary", "--run", str(write_run(tmp_path / "r", [result("gpu01")]))]) == 0


@pytest.mark.parametrize("argv", [
    ["build", "--run", "/nonexistent/run"],
    ["build", "--run", ".", "--formats", "docx"],
    ["verify", "--report", "/nonexistent/report", "--pubkey", "/nonexistent.pub"],
    ["verify", "--report", "pyproject.toml", "--pubkey", "pyproject.toml"],
    ["diff", "/nonexistent/a", "/nonexistent/b"],
])
def test_mistakes_exit_2_with_one_line(argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "rackready.report", *argv], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(("error:", "python -m"))


@pytest.fixture()
def signed_run(tmp_path: Path, cli_signed_report_run) -> tuple[Path, Path]:
    """The run built by the CLI, then signed through `invoke keygen` and `invoke report
    --sign` (once a session, in conftest.py): this test's copy of it and of its key."""
    folder, keygen, sign = cli_signed_report_run
    assert keygen.returncode == 0, keygen.stderr
    assert sign.returncode == 0, sign.stderr
    assert f"wrote {folder / 'run' / 'report' / 'SIGNATURES.json'}" in sign.stdout
    shutil.copytree(folder, tmp_path / "signed", symlinks=True)
    return tmp_path / "signed" / "run", tmp_path / "signed" / "op.key"


def test_invoke_verify_ok_then_failed(signed_run: tuple[Path, Path], tmp_path: Path) -> None:
    run, key = signed_run
    proc = run_cli("verify", "--report", str(run / "report"), "--pubkey", f"{key}.pub",
                   module="invoke")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    head, *files = proc.stdout.splitlines()
    assert "rack report of run" in head and "signed by Dana Tech" in head
    assert all(" OK " in line for line in files[:-1])
    other = tmp_path / "other.key"
    assert run_cli("keygen", "--out", str(other), module="invoke").returncode == 0
    proc = run_cli("verify", "--report", str(run), "--pubkey", f"{other}.pub", module="invoke")
    assert proc.returncode == 1
    assert re.search(r"^rack.json +FAILED +signed by key SHA256:", proc.stdout, re.M)


def test_the_customer_path_needs_only_the_public_key(signed_run: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    run, key = signed_run
    # What the customer receives: the report folder and the .pub, nothing else.
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "operator.pub").write_bytes(Path(f"{key}.pub").read_bytes())
    shutil.copytree(run / "report", inbox / "report")
    proc = run_cli("verify", "--report", str(inbox / "report"), "--pubkey",
                   str(inbox / "operator.pub"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = inbox / "report" / "rack.html"
    html.write_text(html.read_text().replace("FAIL", "PASS"))
    proc = run_cli("verify", "--report", str(inbox / "report"), "--pubkey",
                   str(inbox / "operator.pub"))
    assert proc.returncode == 1
    assert "rack.html" in proc.stdout and "bytes differ from the signed manifest" in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["verify", "--report", "{run}/report"], "--pubkey is required"),
    (["verify", "--report", "{run}/report", "--pubkey", "{key}"], "holds a private key"),
    (["verify", "--report", "{run}/nowhere", "--pubkey", "{key}.pub"], "report folder not found"),
    (["verify", "--report", "{run}/report", "--pubkey", "{run}/run.json"],
     "not a PEM public key"),
    (["keygen"], "--out is required"),
    (["keygen", "--out", "{key}"], "exists; refusing to overwrite a key"),
    (["keygen", "--out", "{run}/no/dir/k"], "is not a directory"),
    (["report", "--run", "{run}", "--sign", "Dana Tech"], "both --sign NAME and --key KEYFILE"),
    (["report", "--run", "{run}", "--sign", "Someone", "--key", "{key}"], "already signed"),
    (["report", "--run", "{run}", "--sign", "Someone", "--key", "{key}.pub"],
     "not a PEM private key"),
])
def test_invoke_mistakes_are_one_line_exit_2(signed_run: tuple[Path, Path], args: list[str],
                                             message: str) -> None:
    run, key = signed_run
    argv = [a.format(run=run, key=key) for a in args]
    proc = run_cli(*argv, module="invoke")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in one_line_error(proc)


def test_wrong_passphrase_is_one_line_exit_2(tmp_path: Path) -> None:
    run = healthy_and_faulty(tmp_path / "run")
    assert main(["build", "--run", str(run), "--formats", "json"]) == 0
    key = tmp_path / "locked.key"
    env = {PASSPHRASE_ENV: "correct horse"}
    assert run_cli("keygen", "--out", str(key), env=env, module="invoke").returncode == 0
    assert "ENCRYPTED PRIVATE KEY" in key.read_text()
    sign = ("report", "--run", str(run), "--sign", "Dana Tech", "--key", str(key))
    proc = run_cli(*sign, env={PASSPHRASE_ENV: "wrong"}, module="invoke")
    assert proc.returncode == 2
    assert one_line_error(proc) == (f"error: wrong passphrase for {key} ({PASSPHRASE_ENV})")
    proc = run_cli(*sign, module="invoke")
    assert proc.returncode == 2
    assert f"set {PASSPHRASE_ENV}" in one_line_error(proc)
    assert run_cli(*sign, env=env, module="invoke").returncode == 0


@pytest.mark.parametrize("task", ["report", "verify", "keygen"])
def test_signing_tasks_have_help_for_every_flag(task: str) -> None:
    out = run_cli(task, "--help", module="invoke").stdout
    options = [line for line in out.splitlines() if line.strip().startswith("-")]
    assert options
    for line in options:
        assert len(line.strip().split(None, 2)) >= 2 and "  " in line.strip(), line
