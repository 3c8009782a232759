"""Ed25519 signatures: keys, signing a run's reports, and verification with the public key."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from test_report_synthetic import healthy_and_faulty

from rackready.report.build import build_reports
from rackready.report.cli import sign_run
from rackready.report.errors import ReportError
from rackready.report.seal.canonical import report_sha256, seal, write_report
from rackready.report.seal.signing import (
    MANIFEST,
    PASSPHRASE_ENV,
    document_problems,
    fingerprint,
    generate_key,
    load_private_key,
    load_public_key,
    sign_reports,
    verify_report_dir,
)
from rackready.site.paths import PROJECT_ROOT

WHEN = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)


@pytest.fixture()
def built(built_report_runs):
    """built(run_dir, fault_gpu=3): a run with gpu01 healthy and gpu02 faulty, reports built
    as JSON, HTML and JUnit (built once a session, copied to run_dir): its report folder."""
    return lambda run_dir, *, fault_gpu=3: built_report_runs(run_dir, fault_gpu=fault_gpu) \
        / "report"


@pytest.fixture()
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         signed_report_run) -> tuple[Path, Path]:
    """The key pair generate_key made for the session's signed run, copied (mode kept)."""
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    private = tmp_path / "operator.key"
    shutil.copy2(signed_report_run.private, private)
    shutil.copy2(signed_report_run.public, f"{private}.pub")
    return private, Path(f"{private}.pub")


@pytest.fixture()
def signed(tmp_path: Path, keys: tuple[Path, Path], signed_report_run) -> Path:
    """The built run signed with keys by Dana Tech at WHEN (signed once a session, copied)."""
    shutil.copytree(signed_report_run.run, tmp_path / "run", symlinks=True)
    return tmp_path / "run" / "report"


def failures(report_dir: Path, pubkey: Path) -> dict[str, list[str]]:
    return {c.name: c.problems for c in verify_report_dir(report_dir, load_public_key(pubkey))
            if not c.ok}


def edit_json(path: Path, change, reseal: bool = False) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(seal(doc) if reseal else doc, indent=2))


# --- keys ---------------------------------------------------------------------------


def test_keygen_writes_a_0600_pkcs8_key_and_a_public_pem(keys: tuple[Path, Path]) -> None:
    private, public = keys
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public.name == "operator.key.pub"
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    # Fingerprint per docs/signing.md, recomputed from the PEM without our helpers.
    raw = serialization.load_pem_public_key(public.read_bytes()).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    want = "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
    assert fingerprint(load_private_key(private).public_key()) == want
    assert len(want) == len("SHA256:") + 43


def test_keygen_refuses_to_overwrite(keys: tuple[Path, Path], tmp_path: Path) -> None:
    private, public = keys
    before = private.read_bytes(), public.read_bytes()
    with pytest.raises(ReportError, match="exists; refusing to overwrite"):
        generate_key(private)
    assert (private.read_bytes(), public.read_bytes()) == before
    # Only the .pub there: still refused, and no private key is left behind.
    lone = tmp_path / "other.key"
    (tmp_path / "other.key.pub").write_text("keep me")
    with pytest.raises(ReportError, match="other.key.pub exists"):
        generate_key(lone)
    assert not lone.exists()


def test_passphrase_protected_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  built) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse")
    private, public, _ = generate_key(tmp_path / "locked.key")
    assert b"ENCRYPTED PRIVATE KEY" in private.read_bytes()
    report_dir = built(tmp_path / "run")
    sign_run(report_dir, "Dana Tech", private, when=WHEN)
    assert failures(report_dir, public) == {}
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong horse")
    with pytest.raises(ReportError, match=f"wrong passphrase for .*locked.key .{PASSPHRASE_ENV}"):
        load_private_key(private)
    monkeypatch.delenv(PASSPHRASE_ENV)
    with pytest.raises(ReportError, match=f"passphrase-protected: set {PASSPHRASE_ENV}"):
        load_private_key(private)


@pytest.mark.parametrize(("content", "message"), [
    (None, "public key not found"),
    (b"hello", "not a PEM public key"),
    ("private", "holds a private key"),
    ("rsa", "not an Ed25519 public key"),
])
def test_bad_public_key_files(tmp_path: Path, keys: tuple[Path, Path], content,
                              message: str) -> None:
    path = tmp_path / "given.pub"
    if content == "private":
        path.write_bytes(keys[0].read_bytes())
    elif content == "rsa":
        from cryptography.hazmat.primitives.asymmetric import rsa

        path.write_bytes(rsa.generate_private_key(public_exponent=65537, key_size=1024)
                         .public_key().public_bytes(serialization.Encoding.PEM,
                                                    serialization.PublicFormat.SubjectPublicKeyInfo))
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ReportError, match=message):
        load_public_key(path)


# --- signing ------------------------------------------------------------------------


def test_signing_covers_every_file_and_verifies(signed: Path, keys: tuple[Path, Path]) -> None:
    checks = verify_report_dir(signed, load_public_key(keys[1]))
    names = [c.name for c in checks]
    assert names[:3] == ["rack.json", "node-gpu01.json", "node-gpu02.json"]
    assert names[-1] == MANIFEST
    assert {"rack.html", "node-gpu01.html", "node-gpu02.html", "junit.xml"} <= set(names)
    assert all(c.ok for c in checks), [(c.name, c.problems) for c in checks]
    rack = json.loads((signed / "rack.json").read_text())
    so = rack["signoff"]
    assert (so["name"], so["date"], so["algorithm"]) == ("Dana Tech", "2026-12-01T09:30:00Z",
                                                        "ed25519")
    assert so["signed_sha256"] == rack["sha256"] == report_sha256(rack)
    assert so["key_fingerprint"] == fingerprint(load_public_key(keys[1]))
    manifest = json.loads((signed / MANIFEST).read_text())
    listed = {f["path"]: f["sha256"] for f in manifest["files"]}
    html = signed / "node-gpu02.html"
    assert listed["node-gpu02.html"] == hashlib.sha256(html.read_bytes()).hexdigest()
    # The re-rendered pages carry the signer and the report hash.
    text = html.read_text()
    node = json.loads((signed / "node-gpu02.json").read_text())
    fp = node["signoff"]["key_fingerprint"]
    assert "Dana Tech" in text and node["sha256"] in text and fp in text
    junit = (signed / "junit.xml").read_text()
    assert f'name="signoff_key_fingerprint" value="{fp}"' in junit
    assert 'name="signoff_name" value="Dana Tech"' in junit and node["sha256"] in junit


def test_the_rack_chain_survives_signing(signed: Path) -> None:
    rack = json.loads((signed / "rack.json").read_text())
    for entry in rack["nodes"]:
        node = json.loads((signed / entry["report"]).read_text())
        assert entry["report_sha256"] == node["sha256"] == node["signoff"]["signed_sha256"]


@pytest.mark.parametrize(("file", "change"), [
    ("node-gpu02.json", lambda d: d.update(hostname="gpu02-replaced.lab")),
    ("node-gpu02.json", lambda d: d["signoff"].update(name="Mallory")),
    ("node-gpu01.json", lambda d: d["signoff"].update(date="2027-01-01T00:00:00Z")),
    ("rack.json", lambda d: d.update(outcome="PASS")),
    ("rack.json", lambda d: d["signoff"].update(statement="I did not look.")),
])
@pytest.mark.parametrize("reseal", [False, True])
def test_an_edited_report_fails(signed: Path, keys: tuple[Path, Path], file: str, change,
                                reseal: bool) -> None:
    edit_json(signed / file, change, reseal=reseal)
    failed = failures(signed, keys[1])
    assert file in failed
    assert failed[file][0].startswith(("signature does not verify", "content does not match",
                                       "the signature names another report hash"))
    # The manifest catches the changed bytes as well.
    assert "bytes differ from the signed manifest" in failed[file]


def test_a_resealed_edit_is_caught_by_the_signature(signed: Path, keys: tuple[Path, Path]) -> None:
    # The attacker recomputes sha256 and signed_sha256: only the signature still tells.
    def change(d):
        d["hostname"] = "elsewhere.lab"

    edit_json(signed / "node-gpu01.json", change, reseal=True)
    doc = json.loads((signed / "node-gpu01.json").read_text())
    doc["signoff"]["signed_sha256"] = doc["sha256"]
    (signed / "node-gpu01.json").write_text(json.dumps(doc))
    problems = failures(signed, keys[1])["node-gpu01.json"]
    assert problems[0].startswith("signature does not verify")
    # ...and the rack report still names the original hash.
    assert any(p.startswith("not the report rack.json lists") for p in problems)


@pytest.mark.parametrize("file", ["node-gpu01.html", "junit.xml", "rack.html"])
def test_an_edited_byte_in_a_rendered_file_fails(signed: Path, keys: tuple[Path, Path],
                                                 file: str) -> None:
    data = bytearray((signed / file).read_bytes())
    data[len(data) // 2] ^= 0x01
    (signed / file).write_bytes(bytes(data))
    assert failures(signed, keys[1]) == {file: ["bytes differ from the signed manifest"]}


def test_a_removed_or_added_file_fails(signed: Path, keys: tuple[Path, Path]) -> None:
    (signed / "junit.xml").unlink()
    (signed / "node-gpu03.html").write_text("<p>PASS</p>")
    (signed / ".hidden.html").write_bytes(b"<p>PASS</p>")  # a hidden name hides nothing
    failed = failures(signed, keys[1])
    assert failed == {"junit.xml": ["missing (the signed manifest lists it)"],
                      "node-gpu03.html": [f"not in the signed manifest {MANIFEST}"],
                      ".hidden.html": [f"not in the signed manifest {MANIFEST}"]}


def test_a_swapped_node_report_fails_the_rack_chain(tmp_path: Path, signed: Path,
                                                    keys: tuple[Path, Path], built) -> None:
    # Another run, validly signed by the same key, with a different fault on gpu02.
    other = built(tmp_path / "other", fault_gpu=5)
    sign_run(other, "Dana Tech", keys[0], when=WHEN)
    foreign = json.loads((other / "node-gpu02.json").read_text())
    assert document_problems(foreign, load_public_key(keys[1]), "node") == []
    shutil.copyfile(other / "node-gpu02.json", signed / "node-gpu02.json")
    failed = failures(signed, keys[1])
    assert set(failed) == {"node-gpu02.json"}
    assert failed["node-gpu02.json"][0].startswith("not the report rack.json lists")


def test_the_wrong_public_key_fails_every_file(signed: Path, tmp_path: Path) -> None:
    _, stranger, _ = generate_key(tmp_path / "stranger.key")
    checks = verify_report_dir(signed, load_public_key(stranger))
    assert checks and not any(c.ok for c in checks)
    rack = next(c for c in checks if c.name == "rack.json")
    assert rack.problems[0].startswith("signed by key SHA256:")
    html = next(c for c in checks if c.name == "rack.html")
    assert html.problems == [f"not covered: {MANIFEST} does not verify"]


def test_an_unsigned_report_fails(tmp_path: Path, keys: tuple[Path, Path], built) -> None:
    report_dir = built(tmp_path / "run")
    failed = failures(report_dir, keys[1])
    assert failed["rack.json"] == ["not signed"]
    assert failed["node-gpu01.json"] == ["not signed"]
    assert failed[MANIFEST][0].startswith("missing")


def test_signing_refuses_a_tampered_or_broken_chain(tmp_path: Path, keys: tuple[Path, Path],
                                                    built) -> None:
    key = load_private_key(keys[0])
    report_dir = built(tmp_path / "run")
    before = {p.name: p.read_bytes() for p in report_dir.iterdir()}
    edit_json(report_dir / "node-gpu01.json", lambda d: d.update(hostname="x"))
    with pytest.raises(ReportError, match="node-gpu01.json.*refusing to sign"):
        sign_reports(report_dir, key, "Dana Tech", WHEN)
    edit_json(report_dir / "node-gpu01.json", lambda d: d.update(hostname="x"), reseal=True)
    with pytest.raises(ReportError, match="rack.json lists node-gpu01.json with sha256"):
        sign_reports(report_dir, key, "Dana Tech", WHEN)
    (report_dir / "node-gpu01.json").write_bytes(before["node-gpu01.json"])
    edit_json(report_dir / "rack.json", lambda d: d.update(outcome="PASS"))
    with pytest.raises(ReportError, match="rack.json: content does not match its sha256"):
        sign_reports(report_dir, key, "Dana Tech", WHEN)
    (report_dir / "rack.json").write_bytes(before["rack.json"])
    with pytest.raises(ReportError, match="signer's name"):
        sign_reports(report_dir, key, "  ", WHEN)
    with pytest.raises(ReportError, match="one line of printable text"):
        sign_reports(report_dir, key, "Dana\nTech", WHEN)
    # Nothing was written by any refusal.
    assert {p.name: p.read_bytes() for p in report_dir.iterdir()} == before


def test_signing_twice_is_refused(signed: Path, keys: tuple[Path, Path]) -> None:
    with pytest.raises(ReportError, match="already signed by Dana Tech on 2026-12-01"):
        sign_run(signed, "Someone Else", keys[0])


def test_a_failed_render_undoes_the_signing(tmp_path: Path, keys: tuple[Path, Path],
                                            monkeypatch: pytest.MonkeyPatch, built) -> None:
    report_dir = built(tmp_path / "run")
    (report_dir / "rack.pdf").write_bytes(b"%PDF stale")  # so PDF is re-rendered
    before = {p.name: p.read_bytes() for p in report_dir.glob("*.json")}
    monkeypatch.setenv("RACKREADY_CHROMIUM", str(tmp_path / "no-chromium"))
    with pytest.raises(ReportError):
        sign_run(report_dir, "Dana Tech", keys[0], when=WHEN)
    assert {p.name: p.read_bytes() for p in report_dir.glob("*.json")} == before
    assert not (report_dir / MANIFEST).exists()
    assert "Dana Tech" not in (report_dir / "rack.html").read_text()


def test_rebuilding_drops_the_signatures(signed: Path, keys: tuple[Path, Path]) -> None:
    build_reports(signed.parent, {"json", "html"})
    assert not (signed / MANIFEST).exists()
    assert failures(signed, keys[1])["rack.json"] == ["not signed"]


def test_a_manifest_with_an_unsafe_name_is_not_followed(signed: Path, tmp_path: Path,
                                                        keys: tuple[Path, Path]) -> None:
    from rackready.report.seal.signing import sign_document

    manifest = json.loads((signed / MANIFEST).read_text())
    manifest["files"].append({"path": "../outside", "sha256": "0" * 64, "bytes": 0})
    manifest = sign_document(seal(manifest), load_private_key(keys[0]), "Dana Tech",
                             "2026-12-01T09:30:00Z")
    write_report(signed / MANIFEST, manifest)
    failed = failures(signed, keys[1])
    assert failed == {MANIFEST: ["lists an unsafe file name '../outside'"]}


def test_unsigned_single_node_run_verifies_once_signed(tmp_path: Path,
                                                       keys: tuple[Path, Path]) -> None:
    run = healthy_and_faulty(tmp_path / "r")
    build_reports(run, {"json"})  # JSON only: nothing else to re-render
    lines = sign_run(run / "report", "Dana Tech", keys[0], when=WHEN)
    assert lines[-1].startswith("key SHA256:")
    assert failures(run / "report", keys[1]) == {}


def _doc_block(start: str, fence: str) -> str:
    text = (PROJECT_ROOT / "docs" / "signing.md").read_text()
    body = text.split(f"```{fence}\n{start}", 1)[1].split("```", 1)[0]
    return start + body


def test_the_documented_script_and_fingerprint_work(signed: Path, keys: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "verify_report.py"
    script.write_text(_doc_block("# verify_report.py", "python"))
    for name in ("rack.json", "node-gpu02.json"):
        proc = subprocess.run([sys.executable, str(script), str(keys[1]), str(signed / name)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0 and proc.stdout.startswith("OK "), proc.stderr
    edit_json(signed / "node-gpu02.json", lambda d: d["signoff"].update(name="Mallory"))
    proc = subprocess.run([sys.executable, str(script), str(keys[1]),
                           str(signed / "node-gpu02.json")], capture_output=True, text=True,
                          check=False)
    assert proc.returncode != 0 and "InvalidSignature" in proc.stderr
    oneliner = _doc_block("python3 -c", "sh").strip()
    proc = subprocess.run(["bash", "-c", oneliner.replace("operator.pub", str(keys[1]))],
                          capture_output=True, text=True, check=False)
    assert proc.stdout.strip() == fingerprint(load_public_key(keys[1])), proc.stderr
