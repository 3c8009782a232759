"""Ed25519 signatures over a report's canonical bytes, checked with the public key alone.

What is signed (docs/signing.md):
- every node-*.json and rack.json: doc["signoff"] holds the signer, date, key
  fingerprint, public key, signed_sha256 (= doc["sha256"]) and the signature over
  the RFC 8785 bytes of the whole document with only signoff["signature"] left out;
- rack.json lists each node report's sha256, so a node report from another run
  (even one signed by the same key) breaks the chain;
- SIGNATURES.json: the sha256 of every other file in the folder (HTML, PDF, JUnit,
  JSON), signed the same way, so the rendered copies are covered too.

Key fingerprint: "SHA256:" + base64 (no padding) of SHA-256 of the raw 32-byte key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from rackready.report.errors import ReportError
from rackready.report.seal.canonical import (
    SIGNOFF_STATEMENT,
    canonical_bytes,
    load_json,
    read_report,
    report_sha256,
    seal,
    write_report,
)

ALGORITHM = "ed25519"
PASSPHRASE_ENV = "RACKREADY_SIGNING_PASSPHRASE"
MANIFEST = "SIGNATURES.json"
RACK = "rack.json"
MANIFEST_STATEMENT = ("These are the exact files of the acceptance report, as signed; "
                      "a file missing, added or changed does not verify.")
_NODE_FILE = re.compile(r"^node-[^/\\]+\.json$")


# --- keys ---------------------------------------------------------------------------


def raw_public(pub: Ed25519PublicKey) -> bytes:
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(pub: Ed25519PublicKey) -> str:
    digest = hashlib.sha256(raw_public(pub)).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def _passphrase() -> bytes | None:
    value = os.environ.get(PASSPHRASE_ENV)
    if value is None:
        return None
    if not value:
        raise ReportError(f"{PASSPHRASE_ENV} is set but empty; unset it or give a passphrase")
    return value.encode("utf-8")


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create path with mode; never replace an existing file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise ReportError(f"{path} exists; refusing to overwrite a key") from None
    except OSError as e:
        raise ReportError(f"cannot create {path}: {e.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def generate_key(path: Path) -> tuple[Path, Path, str]:
    """Write a new private key (PEM PKCS8, 0600, encrypted when the passphrase variable is
    set) and PATH.pub (PEM SubjectPublicKeyInfo). Returns (private, public, fingerprint)."""
    path = Path(path)
    pub_path = path.with_name(path.name + ".pub")
    for p in (path, pub_path):
        if p.exists() or p.is_symlink():
            raise ReportError(f"{p} exists; refusing to overwrite a key")
    if not path.parent.is_dir():
        raise ReportError(f"{path.parent} is not a directory")
    secret = _passphrase()
    key = Ed25519PrivateKey.generate()
    encryption = (serialization.BestAvailableEncryption(secret) if secret
                  else serialization.NoEncryption())
    private_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8, encryption)
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_new(path, private_pem, 0o600)
    try:
        _write_new(pub_path, public_pem, 0o644)
    except ReportError:
        path.unlink()  # no private key without its public half
        raise
    return path, pub_path, fingerprint(key.public_key())


def _read_key_file(path: Path, what: str) -> bytes:
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ReportError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise ReportError(f"{what} {path} is a directory, not a key file") from None
    except OSError as e:
        raise ReportError(f"cannot read {what} {path}: {e.strerror}") from None


def load_private_key(path: Path) -> Ed25519PrivateKey:
    data = _read_key_file(path, "signing key")
    encrypted = b"ENCRYPTED PRIVATE KEY" in data
    secret = _passphrase() if encrypted else None
    if encrypted and secret is None:
        raise ReportError(f"{path} is passphrase-protected: set {PASSPHRASE_ENV}")
    try:
        key = serialization.load_pem_private_key(data, password=secret)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        if encrypted:
            raise ReportError(f"wrong passphrase for {path} ({PASSPHRASE_ENV})") from None
        raise ReportError(f"{path}: not a PEM private key (make one with "
                          "`invoke keygen --out PATH`)") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ReportError(f"{path}: a {type(key).__name__.removeprefix('_')} key; "
                          "reports are signed with Ed25519 keys (`invoke keygen`)")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    data = _read_key_file(path, "public key")
    if b"PRIVATE KEY" in data:
        raise ReportError(f"{path} holds a private key; verify with the public key "
                          f"({Path(path).name}.pub)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise ReportError(f"{path}: not a PEM public key (-----BEGIN PUBLIC KEY-----)") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ReportError(f"{path}: not an Ed25519 public key; rackready signs with Ed25519")
    return key


# --- one document -------------------------------------------------------------------


def is_signed(doc: dict[str, Any]) -> bool:
    signoff = doc.get("signoff")
    return isinstance(signoff, dict) and "signature" in signoff


def signed_bytes(doc: dict[str, Any]) -> bytes:
    """The bytes the signature covers: the whole document, signoff["signature"] left out."""
    signoff = {k: v for k, v in (doc.get("signoff") or {}).items() if k != "signature"}
    return canonical_bytes({**doc, "signoff": signoff})


def utc_stamp(when: datetime | None = None) -> str:
    stamp = (when or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")


def clean_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ReportError("signing needs the signer's name")
    if not name.isprintable():
        raise ReportError("the signer's name must be one line of printable text")
    return name


def sign_document(doc: dict[str, Any], key: Ed25519PrivateKey, name: str,
                  date: str, statement: str | None = None) -> dict[str, Any]:
    """Return doc with a signed signoff; the document's own hash must already match."""
    pub = key.public_key()
    signoff = {
        "name": name, "date": date,
        "statement": statement or (doc.get("signoff") or {}).get("statement")
        or SIGNOFF_STATEMENT,
        "algorithm": ALGORITHM, "key_fingerprint": fingerprint(pub),
        "public_key": base64.b64encode(raw_public(pub)).decode("ascii"),
        "signed_sha256": doc["sha256"],
    }
    signed = {**doc, "signoff": signoff}
    signoff["signature"] = base64.b64encode(key.sign(signed_bytes(signed))).decode("ascii")
    return signed


def document_problems(doc: Any, pub: Ed25519PublicKey, kind: str) -> list[str]:
    """Why doc does not verify with pub (empty: it verifies)."""
    if not isinstance(doc, dict) or "sha256" not in doc:
        return ["not a rackready report (no sha256)"]
    if doc.get("kind") != kind:
        return [f"a {doc.get('kind')!r} document where a {kind} document belongs"]
    try:
        digest = report_sha256(doc)
    except ReportError as e:
        return [str(e)]
    if digest != doc["sha256"]:
        return ["content does not match its sha256 (changed after the report was built)"]
    if not is_signed(doc):
        return ["not signed"]
    signoff = doc["signoff"]
    if signoff.get("algorithm") != ALGORITHM:
        return [f"signature algorithm {signoff.get('algorithm')!r}, expected {ALGORITHM}"]
    if signoff.get("key_fingerprint") != fingerprint(pub):
        return [f"signed by key {signoff.get('key_fingerprint')}, not by {fingerprint(pub)}"]
    if signoff.get("signed_sha256") != doc["sha256"]:
        return ["the signature names another report hash"]
    try:
        signature = base64.b64decode(str(signoff["signature"]), validate=True)
        pub.verify(signature, signed_bytes(doc))
    except (binascii.Error, ValueError, InvalidSignature):
        return ["signature does not verify (content, signer or date changed after signing, "
                "or another key signed it)"]
    return []


# --- a report folder ----------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
    return dict(pairs)


def _load(path: Path) -> Any:
    """A JSON file for verification; duplicate keys refused (readers disagree on them),
    and nesting past canonical.MAX_DEPTH."""
    return load_json(path.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicates)


def _listed_node_files(rack: dict[str, Any]) -> list[tuple[str, str]]:
    """(file name, listed sha256) for each node in the rack report; unsafe names refused."""
    out = []
    for entry in rack.get("nodes") or []:
        if isinstance(entry, dict) and not entry.get("report"):
            continue  # a planned node that never reported: no node file to chain
        name = str(entry.get("report", "")) if isinstance(entry, dict) else ""
        if not _NODE_FILE.match(name):
            raise ReportError(f"rack.json lists a node report named {name!r}")
        out.append((name, str(entry.get("report_sha256"))))
    return out


def sign_reports(report_dir: Path, key: Ed25519PrivateKey, name: str,
                 when: datetime | None = None) -> list[Path]:
    """Sign every node-*.json and rack.json in report_dir after checking their hashes and
    the rack's chain of node hashes; nothing is written unless every check passes."""
    report_dir = Path(report_dir)
    name = clean_name(name)
    rack_path = report_dir / RACK
    rack = read_report(rack_path)
    docs: dict[Path, dict[str, Any]] = {rack_path: rack}
    listed = _listed_node_files(rack)
    for file, listed_sha in listed:
        path = report_dir / file
        doc = read_report(path)
        actual = report_sha256(doc)
        if actual != listed_sha:
            raise ReportError(f"rack.json lists {file} with sha256 {listed_sha[:16]}…, the file "
                              f"hashes to {actual[:16]}…; refusing to sign")
        docs[path] = doc
    extra = sorted({p.name for p in report_dir.glob("node-*.json")} - {f for f, _ in listed})
    if extra:
        raise ReportError(f"{', '.join(extra)} not listed in rack.json; rebuild the reports "
                          "(invoke report --run RUN) before signing")
    for path, doc in docs.items():
        if doc["sha256"] != report_sha256(doc):
            raise ReportError(f"{path.name}: content does not match its sha256; rebuild the "
                              "reports (invoke report --run RUN) before signing")
        if is_signed(doc) or (doc.get("signoff") or {}).get("name"):
            raise ReportError(f"{path.name} is already signed by {doc['signoff'].get('name')} "
                              f"on {doc['signoff'].get('date')}; rebuild the reports to sign "
                              "again")
    date = utc_stamp(when)
    signed = {path: sign_document(doc, key, name, date) for path, doc in docs.items()}
    for path, doc in signed.items():
        write_report(path, doc)
    return list(signed)


def _folder_files(report_dir: Path) -> dict[str, Path]:
    """Every entry of the folder by name, hidden ones too: a file the signature does not
    cover is no part of the signed report, whatever its name."""
    return {p.name: p for p in sorted(report_dir.iterdir())}


def write_manifest(report_dir: Path, key: Ed25519PrivateKey, name: str,
                   when: datetime | None = None) -> Path:
    """SIGNATURES.json: the sha256 of every file in the folder, signed."""
    report_dir = Path(report_dir)
    rack = read_report(report_dir / RACK)
    files = []
    for fname, path in _folder_files(report_dir).items():
        if fname == MANIFEST:
            continue
        if path.is_symlink() or not path.is_file():
            raise ReportError(f"{path} is not a regular file; the report folder holds only "
                              "files")
        data = path.read_bytes()
        files.append({"path": fname, "sha256": hashlib.sha256(data).hexdigest(),
                      "bytes": len(data)})
    doc = seal({"schema_version": "1.0", "kind": "manifest", "run_id": rack.get("run_id"),
                "rack_sha256": rack["sha256"], "files": files, "signoff": {}})
    doc = sign_document(doc, key, clean_name(name), utc_stamp(when), MANIFEST_STATEMENT)
    out = report_dir / MANIFEST
    write_report(out, doc)
    return out


@dataclass
class FileCheck:
    """The verdict on one file of the report folder."""

    name: str
    problems: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def _printable(text: str) -> str:
    # Names and reasons come from files anyone could edit: nothing reaches the terminal raw.
    return "".join(c if c.isprintable() else "?" for c in str(text))


def _signed_note(doc: dict[str, Any]) -> str:
    s = doc["signoff"]
    return _printable(f"signed by {s.get('name')} on {s.get('date')}, "
                      f"sha256 {doc['sha256'][:16]}…")


def resolve_report_dir(path: Path) -> Path:
    """The report folder itself, or a run directory holding one."""
    path = Path(path)
    if not path.exists():
        raise ReportError(f"report folder not found: {path}")
    if not path.is_dir():
        raise ReportError(f"{path} is a file; give the report folder (RUN/report)")
    if not (path / RACK).exists() and not (path / MANIFEST).exists() \
            and (path / "report").is_dir():
        path = path / "report"
    if not (path / RACK).exists() and not (path / MANIFEST).exists():
        raise ReportError(f"{path}: not a report folder (no rack.json or {MANIFEST})")
    return path


def verify_report_dir(report_dir: Path, pub: Ed25519PublicKey) -> list[FileCheck]:
    """Check every file of a report folder against pub; one FileCheck per file."""
    report_dir = resolve_report_dir(report_dir)
    present = _folder_files(report_dir)
    checks: dict[str, FileCheck] = {n: FileCheck(n) for n in present}

    def check(name: str) -> FileCheck:
        return checks.setdefault(name, FileCheck(name))

    docs: dict[str, Any] = {}
    for fname in [RACK, MANIFEST, *(n for n in present if _NODE_FILE.match(n))]:
        path = present.get(fname)
        if path is None:
            check(fname).problems.append("missing")
        elif path.is_symlink() or not path.is_file():
            check(fname).problems.append("not a regular file")
        else:
            try:
                docs[fname] = _load(path)
            except (OSError, UnicodeDecodeError, ValueError) as e:
                check(fname).problems.append(f"not readable JSON ({e})")

    # The rack report, and the chain from it to each node report.
    rack = docs.get(RACK)
    listed: list[tuple[str, str]] = []
    if rack is not None:
        check(RACK).problems += document_problems(rack, pub, "rack")
        try:
            listed = _listed_node_files(rack) if isinstance(rack, dict) else []
        except ReportError as e:
            check(RACK).problems.append(str(e))
    for fname in present:
        if _NODE_FILE.match(fname) and fname in docs:
            check(fname).problems += document_problems(docs[fname], pub, "node")
    for fname, listed_sha in listed:
        if fname not in present:
            check(fname).problems.append("missing (rack.json lists it)")
            continue
        doc = docs.get(fname)
        if doc is None:
            continue
        try:
            actual = report_sha256(doc) if isinstance(doc, dict) else None
        except ReportError:
            actual = None  # document_problems above named the reason
        if actual is not None and actual != listed_sha:
            check(fname).problems.append(
                f"not the report rack.json lists (rack.json: sha256 {listed_sha[:16]}…, "
                f"this file: {actual[:16]}…)")
    for fname in present:
        if _NODE_FILE.match(fname) and rack is not None and fname not in {f for f, _ in listed}:
            check(fname).problems.append("not listed in rack.json")

    # The manifest: every other file's bytes.
    manifest = docs.get(MANIFEST)
    manifest_ok = False
    if manifest is not None:
        problems = document_problems(manifest, pub, "manifest")
        check(MANIFEST).problems += problems
        manifest_ok = not problems
        if manifest_ok and isinstance(rack, dict) and manifest.get("rack_sha256") != \
                rack.get("sha256"):
            check(MANIFEST).problems.append("signed for another rack report")
    elif MANIFEST in present:
        pass  # unreadable: already recorded
    else:
        check(MANIFEST).problems[:] = ["missing: the folder was not signed "
                                       "(invoke report --sign), or the manifest was removed"]
    covered: set[str] = set()
    if manifest_ok and manifest is not None:
        for entry in manifest.get("files") or []:
            fname = str(entry.get("path", "")) if isinstance(entry, dict) else ""
            if not fname or "/" in fname or "\\" in fname or fname.startswith("."):
                check(MANIFEST).problems.append(f"lists an unsafe file name {fname!r}")
                continue
            covered.add(fname)
            path = present.get(fname)
            if path is None:
                check(fname).problems.append("missing (the signed manifest lists it)")
            elif path.is_symlink() or not path.is_file():
                check(fname).problems.append("not a regular file")
            elif hashlib.sha256(path.read_bytes()).hexdigest() != entry.get("sha256"):
                check(fname).problems.append("bytes differ from the signed manifest")
    for fname, c in checks.items():
        if fname == MANIFEST or fname in covered:
            continue
        if manifest_ok:
            c.problems.append(f"not in the signed manifest {MANIFEST}")
        elif fname in present and fname not in docs:
            c.problems.append(f"not covered: {MANIFEST} does not verify")

    for fname, c in checks.items():
        doc = docs.get(fname)
        if c.ok and isinstance(doc, dict) and is_signed(doc):
            c.note = _signed_note(doc)
        elif c.ok:
            c.note = f"sha256 as in the signed {MANIFEST}"
        c.problems = [_printable(p) for p in c.problems]
        c.name = _printable(c.name)
    order = {RACK: 0, MANIFEST: 3}
    return sorted(checks.values(),
                  key=lambda c: (order.get(c.name, 1 if _NODE_FILE.match(c.name) else 2),
                                 c.name))
