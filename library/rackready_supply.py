#!/usr/bin/python
"""The offline bundle's supply chain: hash pins and a signed manifest, written on the
staging host and verified on the node before anything from the bundle is used.

One file owns the format: `write` (offline_bundle, on the staging host) and `verify`
(validation_tools, on the node) are its two sides.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: rackready_supply
short_description: Write or verify the offline bundle's hash pins and signed manifest
description:
  - With O(action=write) (the staging host), writes C(node-requirements.hashes.txt),
    one C(name==version --hash=sha256) line for every project in C(wheels/) (every
    wheel of it hashed), and C(manifest.json), the sha256 and size of every file a node
    takes from the bundle (the wheels, both requirements files, the source tarballs in
    C(src/), the apt repository's C(Release) and C(InRelease)). Files are rewritten only
    when their content changes, so a rebuild of an unchanged bundle changes nothing.
    With O(lock), a wheel whose sha256 that file does not list is refused, naming it.
    The role signs C(manifest.json) (a detached armored signature) with the repository key.
  - With O(action=verify) (a node), fetches C(manifest.json) and C(manifest.json.asc)
    from O(url), checks the signature with C(gpgv) against O(keyring) (the key the node
    already trusts for the site's apt mirror), then fetches every file the manifest
    lists into O(dest) and checks its sha256. A file enters O(dest) only once verified;
    files of O(dest) the manifest does not list are removed. Any failure stops with one
    line naming the file; nothing is installed from an unverified bundle.
  - In check mode nothing is written; verify checks the signature and the files already
    in O(dest), and reports what it would fetch.
version_added: "0.1.0"
author: rackready
options:
  action:
    description: Which side of the supply chain.
    type: str
    choices: [write, verify]
    required: true
  bundle_dir:
    description: The bundle's folder on the staging host (O(action=write)).
    type: path
  lock:
    description:
      - The committed hash-pinned requirements (validation_tools' C(node-requirements.lock))
        on the staging host (O(action=write)); every wheel of C(wheels/) must be one it pins.
    type: path
  url:
    description: The bundle's root on the site mirror, ending in C(/) (O(action=verify)).
    type: str
  keyring:
    description: The site mirror's public key on the node, armored or binary (O(action=verify)).
    type: path
  dest:
    description: Folder on the node that holds the verified files (O(action=verify)).
    type: path
  validate_certs:
    description: Verify the mirror's TLS certificate for https URLs.
    type: bool
    default: true
  timeout:
    description: Seconds for each request to the mirror.
    type: int
    default: 60
"""

EXAMPLES = r"""
- name: Write the hash-pinned requirements and the manifest
  rackready_supply:
    action: write
    bundle_dir: /srv/rackready-bundle
    lock: /srv/rackready-bundle/state/node-requirements.lock

- name: Verify the bundle against its signed manifest
  rackready_supply:
    action: verify
    url: http://mirror.example/rackready/
    keyring: /etc/apt/keyrings/site-mirror.asc
    dest: /opt/rackready/bundle
"""

RETURN = r"""
files:
  description: Every file the manifest lists, by path, with its sha256.
  returned: always
  type: dict
fetched:
  description: Paths fetched (or, in check mode, that would be) into O(dest).
  returned: action=verify
  type: list
written:
  description: Files written (or, in check mode, that would be) into O(bundle_dir).
  returned: action=write
  type: list
manifest_changed:
  description: Whether manifest.json changed (the role signs it again).
  returned: action=write
  type: bool
"""

FORMAT = "rackready-bundle-manifest/1"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.asc"
REQUIREMENTS = "node-requirements.txt"
HASHED = "node-requirements.hashes.txt"
# What a node takes from the bundle besides wheels/ and src/. The .debs are bound by
# apt's own chain (InRelease signed -> Packages hashed -> each .deb hashed).
TOP_FILES = (REQUIREMENTS, HASHED, "debs/Release", "debs/InRelease")
MAX_MANIFEST_BYTES = 16 << 20
_CHUNK = 1 << 20
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
# {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl (PEP 427 / 491)
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


class SupplyError(Exception):
    """One line for the person running the play."""


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def canonical_name(name: str) -> str:
    """PEP 503: torch, PyYAML -> pyyaml, nvidia_ml_py -> nvidia-ml-py."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_wheel(filename: str) -> tuple[str, str]:
    m = _WHEEL.match(filename)
    if not m:
        raise SupplyError(f"wheels/{filename}: not a wheel file name")
    return canonical_name(m["name"]), m["version"]


def requirement_pins(text: str) -> dict[str, str]:
    """name==version lines of a requirements file (comments dropped), by canonical name."""
    pins = {}
    for line in text.splitlines():
        spec = line.split("#")[0].strip()
        if "==" in spec:
            name, version = (p.strip() for p in spec.split("==", 1))
            # a hash-pinned line (the lock's) goes on with --hash options
            pins[canonical_name(re.split(r"[\[;\s]", name)[0])] = version.split()[0]
    return pins


def _matches_pin(version: str, pin: str) -> bool:
    # a local build (2.13.0+cu130) satisfies ==2.13.0, as pip reads it
    return version == pin or version.startswith(pin + "+")


BUNDLE_HEADER = (
    "# Written by the offline bundle build from wheels/: every wheel, pinned by hash.\n"
    "# pip install --require-hashes --no-index --find-links wheels/ -r this file\n")


def hashed_requirements(wheel_dir: str, requirements_text: str,
                        header: str = BUNDLE_HEADER) -> str:
    """One `name==version --hash=sha256:...` line per project in the wheelhouse, every
    wheel of that version hashed (several platforms are several hashes). A project with
    wheels of two versions (a stale download) is refused unless the requirements pin one.
    A pinned project keeps its pin's version (torch==2.13.0 covers 2.13.0+cpu and +cu130
    wheels: one line takes the hashes of every build). Also how the lock is written."""
    found: dict[str, dict[str, list[str]]] = {}
    for filename in sorted(os.listdir(wheel_dir)):
        if not filename.endswith(".whl"):
            continue
        name, version = parse_wheel(filename)
        found.setdefault(name, {}).setdefault(version, []).append(
            sha256_file(os.path.join(wheel_dir, filename)))
    pins = requirement_pins(requirements_text)
    for name, pin in pins.items():
        if not any(_matches_pin(v, pin) for v in found.get(name, {})):
            raise SupplyError(f"wheels/: no wheel of {name}=={pin} (node-requirements.txt)")
    lines = header.splitlines()
    for name in sorted(found):
        versions = found[name]
        if name in pins:  # every local build of the pin (+cpu, +cu130) under the pin
            kept = [h for v, hs in versions.items() if _matches_pin(v, pins[name]) for h in hs]
            versions = {pins[name]: kept}
        if len(versions) > 1:
            raise SupplyError(f"wheels/: {name} in versions {', '.join(sorted(versions))}; "
                              "remove the stale wheels and build again")
        ((version, hashes),) = versions.items()
        lines.append(f"{name}=={version} "
                     + " ".join(f"--hash=sha256:{h}" for h in sorted(set(hashes))))
    return "\n".join(lines) + "\n"


def lock_hashes(text: str) -> set[str]:
    """Every sha256 a hash-pinned requirements file (the lock) allows."""
    return set(re.findall(r"--hash=sha256:([0-9a-f]{64})", text))


def unlocked_wheels(wheel_dir: str, lock_text: str) -> list[str]:
    """The wheels of wheel_dir whose sha256 the lock does not list (a stale or foreign
    file: the bundle would pin it by a hash nobody committed)."""
    allowed = lock_hashes(lock_text)
    return [f for f in sorted(os.listdir(wheel_dir)) if f.endswith(".whl")
            and sha256_file(os.path.join(wheel_dir, f)) not in allowed]


def bundle_files(bundle_dir: str) -> list[str]:
    """The paths (relative, '/'-separated) the manifest lists, sorted."""
    out = [p for p in TOP_FILES if os.path.isfile(os.path.join(bundle_dir, p))]
    for sub in ("wheels", "src"):
        folder = os.path.join(bundle_dir, sub)
        if os.path.isdir(folder):
            out += [f"{sub}/{f}" for f in os.listdir(folder)
                    if os.path.isfile(os.path.join(folder, f)) and not f.startswith(".")]
    return sorted(out)


def build_manifest(bundle_dir: str) -> dict:
    files = {}
    for rel in bundle_files(bundle_dir):
        path = os.path.join(bundle_dir, rel)
        files[rel] = {"sha256": sha256_file(path), "size": os.path.getsize(path)}
    for required in (HASHED, "debs/Release"):
        if required not in files:
            raise SupplyError(f"{required}: missing from the bundle; the manifest needs it")
    return {"format": FORMAT, "files": files}


def render_manifest(manifest: dict) -> bytes:
    # no date, sorted keys: an unchanged bundle gives the same bytes (and no new signature)
    return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()


def safe_path(rel: str) -> bool:
    parts = rel.split("/")
    return (bool(rel) and not rel.startswith("/") and "\\" not in rel
            and all(p not in ("", ".", "..") and not p.startswith(".") for p in parts)
            and parts[0] in ("wheels", "src", "debs", REQUIREMENTS, HASHED)
            and not any(ord(c) < 32 for c in rel))


def parse_manifest(data: bytes) -> dict[str, dict]:
    """The manifest's files; anything not of the format is refused (it was signed, but
    a node still reads no path outside its folder)."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise SupplyError(f"{MANIFEST}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SupplyError(f"{MANIFEST}: not a {FORMAT} document")
    files = doc.get("files")
    if not isinstance(files, dict) or HASHED not in files:
        raise SupplyError(f"{MANIFEST}: lists no {HASHED}")
    for rel, entry in files.items():
        if not safe_path(rel):
            raise SupplyError(f"{MANIFEST}: refuses the path {rel!r}")
        if (not isinstance(entry, dict) or not _HEX64.match(str(entry.get("sha256", "")))
                or not isinstance(entry.get("size"), int) or entry["size"] < 0):
            raise SupplyError(f"{MANIFEST}: {rel}: no sha256 and size")
    return files


def dearmor(data: bytes) -> bytes:
    """An armored OpenPGP key (as package_sources installs it) as binary packets for gpgv;
    a binary keyring is returned as it is."""
    text = data.decode("ascii", "replace")
    if "-----BEGIN PGP PUBLIC KEY BLOCK-----" not in text:
        return data
    out = b""
    for block in text.split("-----BEGIN PGP PUBLIC KEY BLOCK-----")[1:]:
        body = block.split("-----END PGP PUBLIC KEY BLOCK-----")[0]
        lines = body.strip().splitlines()
        # armor headers end at the first blank line (if any); the '=' line is the CRC
        if "" in [ln.strip() for ln in lines]:
            lines = lines[[ln.strip() for ln in lines].index("") + 1:]
        b64 = "".join(ln.strip() for ln in lines if ln.strip() and not ln.startswith("="))
        out += base64.b64decode(b64)
    return out


# --- verify (the node)


def verify_signature(run, gpgv: str, keyring: bytes, data_path: str, sig_path: str,
                     key_name: str) -> None:
    """gpgv's good signature by a key of `keyring` over the manifest, or SupplyError."""
    with tempfile.TemporaryDirectory(prefix="rackready-gpgv-") as tmp:
        ring = os.path.join(tmp, "trusted.gpg")
        with open(ring, "wb") as f:
            f.write(dearmor(keyring))
        rc, out, err = run([gpgv, "--status-fd", "1", "--keyring", ring, sig_path, data_path])
    if rc != 0 or "[GNUPG:] GOODSIG " not in out:
        why = next((ln.strip() for ln in err.splitlines()[::-1] if ln.strip()), f"rc {rc}")
        raise SupplyError(f"{MANIFEST}: the signature does not verify with {key_name} ({why})")


def verify_files(files: dict[str, dict], dest: str, fetch, check_mode: bool) -> list[str]:
    """Every listed file in `dest`, verified: one there already with the manifest's sha256
    is kept, any other is fetched to a temporary name and renamed only when its sha256 is
    the manifest's. Returns the paths fetched; the first mismatch raises, naming the file."""
    fetched = []
    for rel in sorted(files):
        want = files[rel]["sha256"]
        path = os.path.join(dest, *rel.split("/"))
        if os.path.isfile(path) and not os.path.islink(path) and sha256_file(path) == want:
            continue
        fetched.append(rel)
        if check_mode:
            continue
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".partial-", dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "wb") as out:
                got, size = fetch(rel, out, files[rel]["size"])
            if got != want:
                raise SupplyError(f"{rel}: sha256 {got} is not the signed manifest's {want}"
                                  f" ({size} bytes, manifest {files[rel]['size']})")
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return fetched


def stale_files(files: dict[str, dict], dest: str) -> list[str]:
    """Files under dest's wheels/ and src/ the manifest does not list (an older bundle's)."""
    out = []
    for sub in ("wheels", "src"):
        folder = os.path.join(dest, sub)
        if os.path.isdir(folder):
            out += [f"{sub}/{f}" for f in sorted(os.listdir(folder)) if f"{sub}/{f}" not in files]
    return out


def _http_fetcher(module, url: str):
    from ansible.module_utils.urls import open_url

    base = url if url.endswith("/") else url + "/"

    def fetch(rel: str, out, limit: int) -> tuple[str, int]:
        h, size = hashlib.sha256(), 0
        try:
            resp = open_url(base + rel, validate_certs=module.params["validate_certs"],
                            timeout=module.params["timeout"])
            for chunk in iter(lambda: resp.read(_CHUNK), b""):
                size += len(chunk)
                if size > limit:  # longer than the manifest says: not the file
                    raise SupplyError(f"{rel}: larger than the signed manifest's {limit} bytes")
                h.update(chunk)
                out.write(chunk)
        except SupplyError:
            raise
        except Exception as exc:  # noqa: BLE001  urllib, socket and SSL errors alike
            raise SupplyError(f"{rel}: cannot be fetched from {base}: {exc}") from None
        return h.hexdigest(), size

    return fetch


def run_verify(module) -> dict:
    p = module.params
    for name in ("url", "keyring", "dest"):
        if not p[name]:
            raise SupplyError(f"action=verify needs {name}")
    if not os.path.isfile(p["keyring"]):
        raise SupplyError(f"{p['keyring']}: no such key (package_sources installs the mirror's)")
    gpgv = module.get_bin_path("gpgv")
    if not gpgv:
        raise SupplyError("gpgv is not installed (apt checks signed repositories with it)")
    fetch = _http_fetcher(module, p["url"])
    with tempfile.TemporaryDirectory(prefix="rackready-manifest-") as tmp:
        paths = {}
        for name, limit in ((MANIFEST, MAX_MANIFEST_BYTES), (SIGNATURE, 1 << 16)):
            paths[name] = os.path.join(tmp, name)
            with open(paths[name], "wb") as out:
                fetch(name, out, limit)
        with open(p["keyring"], "rb") as f:
            keyring = f.read()
        verify_signature(module.run_command, gpgv, keyring, paths[MANIFEST], paths[SIGNATURE],
                         p["keyring"])
        with open(paths[MANIFEST], "rb") as f:
            data = f.read()
    files = parse_manifest(data)
    fetched = verify_files(files, p["dest"], fetch, module.check_mode)
    stale = stale_files(files, p["dest"])
    kept = os.path.join(p["dest"], MANIFEST)
    same = _same_bytes(kept, data)
    if not module.check_mode:
        for rel in stale:
            os.unlink(os.path.join(p["dest"], *rel.split("/")))
        if not same:  # the verified manifest beside the files, for a person to read
            with open(kept + ".tmp", "wb") as f:
                f.write(data)
            os.replace(kept + ".tmp", kept)
    return {"changed": bool(fetched or stale or not same), "fetched": fetched,
            "removed": stale, "files": {k: v["sha256"] for k, v in files.items()}}


# --- write (the staging host)


def _same_bytes(path: str, data: bytes) -> bool:
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read() == data


def _write_if_changed(path: str, data: bytes, check_mode: bool) -> bool:
    if _same_bytes(path, data):
        return False
    if not check_mode:
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.chmod(path + ".tmp", 0o644)
        os.replace(path + ".tmp", path)
    return True


def run_write(module) -> dict:
    top = module.params["bundle_dir"]
    if not top or not os.path.isdir(os.path.join(top, "wheels")):
        raise SupplyError(f"{top}/wheels: no wheelhouse to pin")
    with open(os.path.join(top, REQUIREMENTS)) as f:
        requirements = f.read()
    if module.params["lock"]:
        with open(module.params["lock"]) as f:
            foreign = unlocked_wheels(os.path.join(top, "wheels"), f.read())
        if foreign:
            more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
            raise SupplyError(f"wheels/{foreign[0]}{more}: its sha256 is not in "
                              f"{os.path.basename(module.params['lock'])}; remove it and "
                              "build again")
    hashed = hashed_requirements(os.path.join(top, "wheels"), requirements).encode()
    written = []
    if _write_if_changed(os.path.join(top, HASHED), hashed, module.check_mode):
        written.append(HASHED)
    if module.check_mode and written:  # the manifest would cover the new file
        return {"changed": True, "written": written + [MANIFEST], "manifest_changed": True,
                "files": {}}
    manifest = build_manifest(top)
    changed = _write_if_changed(os.path.join(top, MANIFEST), render_manifest(manifest),
                                module.check_mode)
    if changed:
        written.append(MANIFEST)
    return {"changed": bool(written), "written": written, "manifest_changed": changed,
            "files": {k: v["sha256"] for k, v in manifest["files"].items()}}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["write", "verify"]},
            "bundle_dir": {"type": "path"},
            "lock": {"type": "path"},
            "url": {"type": "str"},
            "keyring": {"type": "path"},
            "dest": {"type": "path"},
            "validate_certs": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    try:
        result = (run_write if module.params["action"] == "write" else run_verify)(module)
    except SupplyError as exc:
        module.fail_json(msg=f"offline bundle: {exc}; nothing from the bundle was installed"
                         if module.params["action"] == "verify" else f"offline bundle: {exc}")
    except OSError as exc:
        module.fail_json(msg=f"offline bundle: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
