"""The offline bundle's supply chain (library/rackready_supply.py): every wheel pinned by
hash, a manifest of every file a node takes, signed with the repository key, and the
node's verification before it uses any of them.

Signatures are real: a throwaway ed25519 key in a temporary GNUPGHOME signs, `gpgv`
verifies against the armored key as package_sources installs it. The node's fetches go
through the module's own HTTP path (Ansible's open_url) to a local http.server, and pip
itself checks the hash-pinned requirements (`--dry-run`, wheels built here).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
LIB = ROOT / "library" / "rackready_supply.py"
spec = importlib.util.spec_from_file_location("rackready_supply", LIB)
supply = importlib.util.module_from_spec(spec)
sys.modules["rackready_supply"] = supply
spec.loader.exec_module(supply)

GPG = shutil.which("gpg")
GPGV = shutil.which("gpgv")
needs_gpg = pytest.mark.skipif(not (GPG and GPGV), reason="gpg and gpgv are not installed")

REQUIREMENTS = (
    "# the node venv\n"
    "torch==2.13.0  # GEMM\n"
    "PyYAML==6.0.3  # profiles\n"
    "nvidia-ml-py==13.580.126  # telemetry\n"
)


def wheel(folder: Path, name: str, version: str, tag: str = "py3-none-any",
          salt: str = "") -> Path:
    """A real, installable wheel (no code) named as pip names them."""
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                            f"Summary: test {salt}\n",
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                         f"Tag: {tag}\n",
    }

    def record_line(n: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{n},sha256={digest},{len(data)}\n"

    record = "".join(record_line(n, d.encode()) for n, d in files.items())
    record += f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{info}/RECORD", record)
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def wheels(tmp_path: Path) -> Path:
    w = tmp_path / "bundle" / "wheels"
    w.mkdir(parents=True)
    wheel(w, "torch", "2.13.0+cpu", "cp311-cp311-linux_x86_64")
    wheel(w, "PyYAML", "6.0.3", "cp311-cp311-manylinux_2_17_x86_64")
    wheel(w, "PyYAML", "6.0.3", "cp311-cp311-manylinux_2_28_x86_64")  # a second platform
    wheel(w, "nvidia-ml-py", "13.580.126")
    wheel(w, "filelock", "3.20.0")  # a dependency, in no requirement line
    return w


# --- the hash-pinned requirements (staging host)

def test_every_wheel_is_pinned_by_its_hash(wheels: Path):
    text = supply.hashed_requirements(str(wheels), REQUIREMENTS)
    lines = {ln.split("==")[0]: ln for ln in text.splitlines() if not ln.startswith("#")}
    assert sorted(lines) == ["filelock", "nvidia-ml-py", "pyyaml", "torch"]
    torch = wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"
    # under the pin's version: one line takes the hashes of every local build (+cpu, +cu130)
    assert lines["torch"] == f"torch==2.13.0 --hash=sha256:{sha(torch)}"
    yaml_hashes = sorted(sha(p) for p in wheels.glob("PyYAML-*"))
    assert lines["pyyaml"] == "pyyaml==6.0.3 " + " ".join(f"--hash=sha256:{h}"
                                                          for h in yaml_hashes)
    assert lines["filelock"].startswith("filelock==3.20.0 --hash=sha256:")
    # the same wheelhouse gives the same bytes (a rebuild changes nothing)
    assert supply.hashed_requirements(str(wheels), REQUIREMENTS) == text


def test_pip_installs_from_the_pinned_file_and_refuses_a_swapped_wheel(wheels: Path,
                                                                      tmp_path: Path):
    pinned = tmp_path / "pinned.txt"
    pinned.write_text(supply.hashed_requirements(str(wheels), REQUIREMENTS))
    # only pure wheels here, so pip on any platform can take them
    for w in wheels.glob("*.whl"):
        if "none-any" not in w.name:
            w.unlink()
    pure = tmp_path / "pure.txt"
    pure.write_text(supply.hashed_requirements(str(wheels), "nvidia-ml-py==13.580.126\n"))

    def pip() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
             "--require-hashes", "--no-index", "--find-links", str(wheels), "-r", str(pure),
             "--disable-pip-version-check", "--no-cache-dir"],
            capture_output=True, text=True, timeout=120)

    ok = pip()
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "nvidia-ml-py-13.580.126" in ok.stdout and "filelock-3.20.0" in ok.stdout
    # another file under the same name: pip refuses it
    name = next(wheels.glob("filelock-*.whl"))
    name.unlink()
    wheel(wheels, "filelock", "3.20.0", salt="swapped")
    bad = pip()
    assert bad.returncode != 0
    assert "DO NOT MATCH THE HASHES" in bad.stdout + bad.stderr


def test_a_requirement_without_its_wheel_or_a_stale_version_is_refused(wheels: Path):
    (wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").unlink()
    with pytest.raises(supply.SupplyError, match=r"no wheel of torch==2.13.0"):
        supply.hashed_requirements(str(wheels), REQUIREMENTS)
    wheel(wheels, "torch", "2.13.0+cpu", "cp311-cp311-linux_x86_64")
    # a stale wheel of a pinned project is left out; of a dependency, refused by name
    wheel(wheels, "PyYAML", "6.0.2")
    assert "6.0.2" not in supply.hashed_requirements(str(wheels), REQUIREMENTS)
    wheel(wheels, "filelock", "3.19.1")
    with pytest.raises(supply.SupplyError, match=r"filelock in versions 3.19.1, 3.20.0"):
        supply.hashed_requirements(str(wheels), REQUIREMENTS)


def test_wheel_names_and_requirement_pins_are_read_as_pip_reads_them():
    assert supply.parse_wheel("nvidia_ml_py-13.580.126-py3-none-any.whl") == \
        ("nvidia-ml-py", "13.580.126")
    assert supply.parse_wheel("torch-2.13.0+cu130-1-cp311-cp311-manylinux_2_28_x86_64.whl") \
        == ("torch", "2.13.0+cu130")
    with pytest.raises(supply.SupplyError, match="not a wheel file name"):
        supply.parse_wheel("torch.tar.gz")
    assert supply.requirement_pins(REQUIREMENTS) == {
        "torch": "2.13.0", "pyyaml": "6.0.3", "nvidia-ml-py": "13.580.126"}
    # the project's one list reads the same way
    real = (ROOT / "roles/validation_tools/files/node-requirements.txt").read_text()
    assert set(supply.requirement_pins(real)) == {"torch", "numpy", "pyyaml", "nvidia-ml-py"}


def test_the_bundle_pins_no_wheel_the_lock_does_not_list(wheels: Path, tmp_path: Path):
    top = bundle_dir(wheels)
    lock = tmp_path / "node-requirements.lock"
    lock.write_text(supply.hashed_requirements(str(wheels), REQUIREMENTS, header="# lock\n"))
    assert supply.unlocked_wheels(str(wheels), lock.read_text()) == []
    assert supply.run_write(FakeModule(bundle_dir=str(top), lock=str(lock)))["written"]
    # a file of the same name and another hash (a stale or foreign download)
    (wheels / "filelock-3.20.0-py3-none-any.whl").unlink()
    wheel(wheels, "filelock", "3.20.0", salt="foreign")
    with pytest.raises(supply.SupplyError, match=r"^wheels/filelock-3\.20\.0-py3-none-any\.whl: "
                                                 r"its sha256 is not in node-requirements\.lock"):
        supply.run_write(FakeModule(bundle_dir=str(top), lock=str(lock)))


LOCK = ROOT / "roles/validation_tools/files/node-requirements.lock"


def test_the_committed_lock_pins_the_one_list_and_every_dependency_by_hash():
    text = LOCK.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    pins = supply.requirement_pins(text)
    assert len(pins) == len(lines)
    for line in lines:  # what --require-hashes demands of every line
        assert re.fullmatch(r"[a-z0-9-]+==[^\s]+( --hash=sha256:[0-9a-f]{64})+", line), line
    # the one list's pins, at their versions, and nothing pinned twice
    listed = supply.requirement_pins(
        (ROOT / "roles/validation_tools/files/node-requirements.txt").read_text())
    assert {n: pins.get(n) for n in listed} == listed
    # torch's dependencies the lab's build needs (CPU wheel): hashed as well
    assert {"filelock", "jinja2", "networkx", "sympy", "typing-extensions"} <= set(pins)


# --- the manifest

def bundle_dir(wheels: Path) -> Path:
    top = wheels.parent
    (top / "node-requirements.txt").write_text(REQUIREMENTS)
    (top / "src").mkdir(exist_ok=True)
    (top / "src/nccl-tests-2.19.6.tar.gz").write_bytes(b"\x1f\x8b tarball")
    (top / "debs").mkdir(exist_ok=True)
    (top / "debs/Release").write_text("Origin: test\nSHA256:\n")
    (top / "debs/InRelease").write_text("-----BEGIN PGP SIGNED MESSAGE-----\n")
    (top / "debs/nvidia-open_1_all.deb").write_bytes(b"deb")  # apt's chain covers it
    (top / "state").mkdir(exist_ok=True)
    (top / "state/status").write_text("")
    return top


def test_the_manifest_lists_every_file_a_node_takes_with_its_sha256(wheels: Path):
    top = bundle_dir(wheels)
    with pytest.raises(supply.SupplyError, match="node-requirements.hashes.txt: missing"):
        supply.build_manifest(str(top))
    (top / supply.HASHED).write_text(supply.hashed_requirements(str(wheels), REQUIREMENTS))
    m = supply.build_manifest(str(top))
    assert m["format"] == supply.FORMAT
    expected = sorted(["node-requirements.txt", "node-requirements.hashes.txt",
                       "debs/Release", "debs/InRelease", "src/nccl-tests-2.19.6.tar.gz"]
                      + [f"wheels/{w.name}" for w in wheels.glob("*.whl")])
    assert sorted(m["files"]) == expected
    for rel, entry in m["files"].items():
        assert entry == {"sha256": sha(top / rel), "size": (top / rel).stat().st_size}
    data = supply.render_manifest(m)
    assert supply.render_manifest(supply.build_manifest(str(top))) == data  # no date in it
    assert supply.parse_manifest(data) == m["files"]


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "wheels/../../x",
                                  "debs/./Release", "wheels/.hidden", "other/file", ""])
def test_a_manifest_path_outside_the_bundle_is_refused(path: str):
    files = {supply.HASHED: {"sha256": "0" * 64, "size": 1},
             path: {"sha256": "0" * 64, "size": 1}}
    doc = json.dumps({"format": supply.FORMAT, "files": files}).encode()
    with pytest.raises(supply.SupplyError, match="refuses the path"):
        supply.parse_manifest(doc)


def test_a_manifest_of_another_shape_is_refused():
    for doc, why in ((b"{", "not JSON"), (b"[]", "not a rackready"),
                     (json.dumps({"format": supply.FORMAT, "files": {}}).encode(), "lists no"),
                     (json.dumps({"format": supply.FORMAT, "files": {
                         supply.HASHED: {"sha256": "x", "size": 1}}}).encode(), "no sha256")):
        with pytest.raises(supply.SupplyError, match=why):
            supply.parse_manifest(doc)


# --- signing (staging) and verifying (node), end to end

class Gpg:
    homes: list[Path] = []  # every home made by the test that runs: its agent is stopped after

    def __init__(self, home: Path, name: str):
        self.home, self.name = home, name
        home.mkdir(mode=0o700, parents=True)
        Gpg.homes.append(home)
        self("--passphrase", "", "--quick-gen-key", name, "ed25519", "sign", "never")

    def __call__(self, *args: str) -> str:
        return subprocess.run([GPG, "--homedir", str(self.home), "--batch", "--yes", *args],
                              capture_output=True, text=True, check=True, timeout=60).stdout

    def sign(self, path: Path) -> None:
        # as the offline_bundle role signs manifest.json
        self("--local-user", self.name, "--armor", "--detach-sign", "-o", f"{path}.asc",
             str(path))

    def armored(self) -> str:
        return self("--armor", "--export", self.name)


@pytest.fixture(autouse=True)
def _stop_gpg_agents():
    """gpg starts an agent per home that outlives the test (a daemon): stop each one."""
    yield
    gpgconf = shutil.which("gpgconf")
    while Gpg.homes:
        home = Gpg.homes.pop()
        if gpgconf:
            subprocess.run([gpgconf, "--homedir", str(home), "--kill", "gpg-agent"],
                           capture_output=True, timeout=30, check=False)


class FakeModule:
    """What run_verify and run_write use of AnsibleModule."""

    def __init__(self, check_mode: bool = False, **params):
        self.check_mode = check_mode
        self.params = {"validate_certs": True, "timeout": 10, "bundle_dir": None, "url": None,
                       "keyring": None, "dest": None, "lock": None, **params}

    @staticmethod
    def get_bin_path(name: str):
        return shutil.which(name)

    @staticmethod
    def run_command(args):
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr


@pytest.fixture()
def served(tmp_path: Path, wheels: Path):
    """A bundle written and signed as the staging host does, served over HTTP."""
    top = bundle_dir(wheels)
    key = Gpg(tmp_path / "gnupg", "rackready-bundle-unit")
    result = supply.run_write(FakeModule(bundle_dir=str(top)))
    assert result["written"] == [supply.HASHED, supply.MANIFEST]
    key.sign(top / supply.MANIFEST)
    keyring = tmp_path / "site-mirror.asc"  # as package_sources installs it
    keyring.write_text(key.armored())
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(top))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    yield top, url, keyring, key
    server.shutdown()
    server.server_close()


def verify(url: str, keyring: Path, dest: Path, check_mode: bool = False) -> dict:
    return supply.run_verify(FakeModule(check_mode=check_mode, url=url, keyring=str(keyring),
                                        dest=str(dest)))


@needs_gpg
def test_a_node_takes_only_verified_files_and_a_second_run_changes_nothing(served, tmp_path):
    top, url, keyring, _ = served
    dest = tmp_path / "node-cache"
    check = verify(url, keyring, dest, check_mode=True)
    assert check["changed"] and not dest.exists()  # check mode writes nothing
    first = verify(url, keyring, dest)
    manifest = json.loads((top / supply.MANIFEST).read_text())["files"]
    assert first["changed"] and sorted(first["fetched"]) == sorted(manifest)
    for rel, entry in manifest.items():
        assert sha(dest / rel) == entry["sha256"], rel
    assert not (dest / "debs/nvidia-open_1_all.deb").exists()  # apt fetches the debs
    assert first["files"]["src/nccl-tests-2.19.6.tar.gz"] == sha(
        top / "src/nccl-tests-2.19.6.tar.gz")
    second = verify(url, keyring, dest)
    assert second["changed"] is False and second["fetched"] == []
    assert verify(url, keyring, dest, check_mode=True)["changed"] is False


@needs_gpg
def test_a_swapped_wheel_is_refused_by_name_and_never_enters_the_cache(served, tmp_path):
    top, url, keyring, _ = served
    name = "nvidia_ml_py-13.580.126-py3-none-any.whl"
    (top / "wheels" / name).unlink()
    wheel(top / "wheels", "nvidia-ml-py", "13.580.126", salt="someone else's")  # same name
    dest = tmp_path / "node-cache"
    # (a longer file is cut where the manifest's size ends; one as long, by its sha256)
    with pytest.raises(supply.SupplyError, match=rf"^wheels/{re.escape(name)}: (sha256 "
                                                 r"[0-9a-f]{64} is not|larger than) the "
                                                 r"signed manifest's"):
        verify(url, keyring, dest)
    assert not (dest / "wheels" / name).exists()
    assert not [p for p in (dest / "wheels").iterdir() if p.name.startswith(".partial")]


@needs_gpg
def test_a_wheel_swapped_in_the_cache_is_fetched_again(served, tmp_path):
    _, url, keyring, _ = served
    dest = tmp_path / "node-cache"
    verify(url, keyring, dest)
    victim = next((dest / "wheels").glob("filelock-*"))
    victim.write_bytes(b"tampered")
    again = verify(url, keyring, dest)
    assert again["fetched"] == [f"wheels/{victim.name}"]
    (dest / "wheels/stale-1.0-py3-none-any.whl").write_bytes(b"old bundle")
    assert verify(url, keyring, dest)["removed"] == ["wheels/stale-1.0-py3-none-any.whl"]
    assert not (dest / "wheels/stale-1.0-py3-none-any.whl").exists()


@needs_gpg
def test_an_edited_manifest_or_another_key_is_refused(served, tmp_path):
    top, url, keyring, _ = served
    dest = tmp_path / "node-cache"
    other = tmp_path / "other.asc"
    other.write_text(Gpg(tmp_path / "other-gnupg", "someone-else").armored())
    with pytest.raises(supply.SupplyError, match=rf"manifest.json: the signature does not "
                                                 rf"verify with {other}"):
        verify(url, other, dest)
    # the mirror's writer re-hashes a swapped wheel into the manifest: the signature breaks
    doc = json.loads((top / supply.MANIFEST).read_text())
    rel = next(iter(k for k in doc["files"] if k.startswith("wheels/")))
    doc["files"][rel]["sha256"] = "0" * 64
    (top / supply.MANIFEST).write_bytes(supply.render_manifest(doc))
    with pytest.raises(supply.SupplyError, match="the signature does not verify"):
        verify(url, keyring, dest)
    # ... and a manifest signed by the writer's own key too
    Gpg(tmp_path / "writer", "mirror-writer").sign(top / supply.MANIFEST)
    with pytest.raises(supply.SupplyError, match="the signature does not verify"):
        verify(url, keyring, dest)
    assert not dest.exists() or not any(dest.rglob("*.whl"))


@needs_gpg
def test_a_rebuild_of_an_unchanged_bundle_writes_nothing(served):
    top, _, _, _ = served
    again = supply.run_write(FakeModule(bundle_dir=str(top)))
    assert again == {**again, "changed": False, "written": [], "manifest_changed": False}
    (top / "src/nccl-tests-2.19.6.tar.gz").write_bytes(b"another release")
    moved = supply.run_write(FakeModule(check_mode=True, bundle_dir=str(top)))
    assert moved["manifest_changed"] and moved["written"] == [supply.MANIFEST]
    assert supply.run_write(FakeModule(bundle_dir=str(top)))["written"] == [supply.MANIFEST]


@needs_gpg
def test_dearmor_gives_the_key_gpg_itself_exports(tmp_path):
    key = Gpg(tmp_path / "gnupg", "dearmor-test")
    binary = subprocess.run([GPG, "--homedir", str(key.home), "--batch", "--export",
                             "dearmor-test"], capture_output=True, check=True).stdout
    assert supply.dearmor(key.armored().encode()) == binary
    assert supply.dearmor(binary) == binary


@needs_gpg
def test_the_module_fails_in_one_line_naming_the_file(served, tmp_path, monkeypatch, capsys):
    from ansible.module_utils import basic

    top, url, keyring, _ = served
    name = "filelock-3.20.0-py3-none-any.whl"
    (top / "wheels" / name).write_bytes(b"swapped")
    args = {"ANSIBLE_MODULE_ARGS": {"action": "verify", "url": url, "keyring": str(keyring),
                                    "dest": str(tmp_path / "cache"),
                                    "_ansible_remote_tmp": str(tmp_path),
                                    "_ansible_keep_remote_files": False}}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps(args).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    with pytest.raises(SystemExit):
        supply.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] is True
    assert "\n" not in out["msg"]
    assert out["msg"].startswith(f"offline bundle: wheels/{name}: sha256 ")
    assert out["msg"].endswith("nothing from the bundle was installed")


def test_the_module_documents_itself():
    import yaml

    doc = yaml.safe_load(supply.DOCUMENTATION)
    assert doc["module"] == "rackready_supply"
    assert set(doc["options"]) == {"action", "bundle_dir", "lock", "url", "keyring", "dest",
                                   "validate_certs", "timeout"}
    yaml.safe_load(supply.EXAMPLES)
    yaml.safe_load(supply.RETURN)


# --- the roles around the module

def _yaml(rel: str):
    import yaml

    return yaml.safe_load((ROOT / rel).read_text())


def _template(text, **variables):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    return Templar(loader=DataLoader(), variables=variables).template(text)


def _validation_tools_vars(**over) -> dict:
    v = {**_yaml("roles/validation_tools/defaults/main.yml"),
         **_yaml("roles/validation_tools/vars/main.yml"), **over}
    return v


def test_the_node_verifies_the_bundle_before_it_installs_anything():
    tasks = _yaml("roles/validation_tools/tasks/main.yml")
    names = [t["name"] for t in tasks]
    verify = next(t for t in tasks if "rackready_supply" in t)
    assert verify["rackready_supply"] == {
        "action": "verify", "url": "{{ validation_tools_bundle_url }}",
        "keyring": "{{ validation_tools_bundle_key }}",
        "dest": "{{ __validation_tools_bundle_dir }}"}
    # before the first install of any kind (apt, pip, the nccl-tests import)
    first_install = min(i for i, t in enumerate(tasks) if {"ansible.builtin.apt",
                        "ansible.builtin.pip", "ansible.builtin.import_tasks"} & set(t))
    assert names.index(verify["name"]) < first_install
    assert "failed_when" not in verify and verify["ignore_errors"] == "{{ ansible_check_mode }}"


def test_with_a_bundle_pip_installs_the_hash_pinned_file_from_the_verified_wheels():
    v = _validation_tools_vars(validation_tools_bundle_url="http://mirror.example/rackready/",
                               validation_tools_wheelhouse_url="http://mirror.example/w/")
    req = _template(v["__validation_tools_pip_requirements"], **v)
    args = _template(v["__validation_tools_pip_args"], **v)
    assert req == "/opt/rackready/bundle/node-requirements.hashes.txt"
    assert args == "--require-hashes --no-index --find-links /opt/rackready/bundle/wheels"
    assert _template(v["__validation_tools_nccl_tests_source"], **v) == \
        "/opt/rackready/bundle/src/nccl-tests-2.19.6.tar.gz"
    # the key is the mirror's, as package_sources installs it
    assert _template(v["validation_tools_bundle_key"], **v,
                     package_sources_repositories=[{"name": "rack1-mirror"}]) == \
        "/etc/apt/keyrings/rack1-mirror.asc"
    # without a bundle: the wheelhouse as before (the lab), the tarball fetched by hash
    plain = _validation_tools_vars(validation_tools_wheelhouse_url="http://192.0.2.1:8080/w/",
                                   validation_tools_nccl_tests_url="http://m/x.tar.gz")
    assert _template(plain["__validation_tools_pip_requirements"], **plain) == \
        "/opt/rackready/node-requirements.lock"
    # plain http inside an air gap: pip needs the host trusted; the hashes make it safe
    assert _template(plain["__validation_tools_pip_args"], **plain) == \
        "--require-hashes --no-index --find-links http://192.0.2.1:8080/w/ " \
        "--trusted-host 192.0.2.1"
    assert _template(plain["__validation_tools_nccl_tests_source"], **plain) == \
        "/opt/rackready/nccl-tests-2.19.6.tar.gz"
    assert _template(_validation_tools_vars()["__validation_tools_nccl_tests_source"],
                     **_validation_tools_vars()) == ""


@pytest.mark.parametrize(("mode", "args"), [
    ({"validation_tools_bundle_url": "http://m/b/"},
     "--require-hashes --no-index --find-links /opt/rackready/bundle/wheels"),
    ({"validation_tools_wheelhouse_url": "http://192.0.2.10/w/"},
     "--require-hashes --no-index --find-links http://192.0.2.10/w/ --trusted-host 192.0.2.10"),
    ({"validation_tools_wheelhouse_url": "https://mirror.example/w/"},  # TLS: nothing trusted
     "--require-hashes --no-index --find-links https://mirror.example/w/"),
    ({}, "--require-hashes"),  # online, pip's configured index
    ({"validation_tools_torch_index_url": "https://download.pytorch.org/whl/cu130"},
     "--require-hashes --extra-index-url https://download.pytorch.org/whl/cu130"),
])
def test_every_install_mode_is_hash_checked(mode, args):
    v = _validation_tools_vars(**mode)
    assert _template(v["__validation_tools_pip_args"], **v) == args
    req = _template(v["__validation_tools_pip_requirements"], **v)
    assert req.endswith("/node-requirements.hashes.txt" if "validation_tools_bundle_url" in mode
                        else "/node-requirements.lock")
    tasks = _yaml("roles/validation_tools/tasks/main.yml")
    copy = next(t["ansible.builtin.copy"] for t in tasks if "ansible.builtin.copy" in t)
    assert copy == {"src": "node-requirements.lock",
                    "dest": "{{ __validation_tools_requirements }}",
                    "owner": "root", "group": "root", "mode": "0644"}


def test_the_nccl_tests_tarball_is_used_only_by_its_sha256():
    tasks = _yaml("roles/validation_tools/tasks/nccl_tests.yml")
    block = next(t for t in tasks if t["name"] == "Build nccl-tests for this GPU")["block"]
    names = [t["name"] for t in block]
    refuse = next(t for t in block if "ansible.builtin.assert" in t)
    fetch = next(t for t in block if "ansible.builtin.get_url" in t)
    unpack = next(t for t in block if "ansible.builtin.unarchive" in t)
    assert names.index(refuse["name"]) < names.index(fetch["name"]) < names.index(unpack["name"])
    assert fetch["ansible.builtin.get_url"]["checksum"] == \
        "sha256:{{ validation_tools_nccl_tests_sha256 }}"
    assert fetch["ansible.builtin.get_url"]["dest"] == unpack["ansible.builtin.unarchive"]["src"] \
        == "{{ __validation_tools_nccl_tests_source }}"
    that = "{{ " + refuse["ansible.builtin.assert"]["that"] + " }}"
    tarball = "nccl-tests-2.19.6.tar.gz"
    base = {"__validation_tools_nccl_tests_tarball": tarball,
            "validation_tools_nccl_tests_url": "http://m/x.tar.gz",
            **refuse["vars"]}
    assert _template(that, **base, validation_tools_bundle_url="",
                     validation_tools_nccl_tests_sha256="") is False
    assert _template(that, **base, validation_tools_bundle_url="",
                     validation_tools_nccl_tests_sha256="a" * 64) is True
    listed = {"files": {f"src/{tarball}": "b" * 64}}
    assert _template(that, **base, validation_tools_bundle_url="http://m/",
                     validation_tools_nccl_tests_sha256="",
                     validation_tools_register_bundle=listed) is True
    assert _template(that, **base, validation_tools_bundle_url="http://m/",
                     validation_tools_nccl_tests_sha256="",
                     validation_tools_register_bundle={"files": {}}) is False


def test_the_staging_host_pins_and_signs_after_the_repository_and_keeps_secrets_out():
    tasks = _yaml("roles/offline_bundle/tasks/main.yml")
    names = [t["name"] for t in tasks]
    write = next(t for t in tasks if "rackready_supply" in t)
    sign = next(t for t in tasks if t["name"] == "Sign the bundle's manifest")
    index = next(t for t in tasks if t["name"] == "Index and sign the flat repository")
    assert write["rackready_supply"] == {"action": "write",
                                         "bundle_dir": "{{ offline_bundle_dir }}",
                                         "lock": "{{ __offline_bundle_lock }}"}
    # the wheels are downloaded by the committed lock, each checked by its sha256
    download = next(t for t in tasks if t["name"] == "Download the wheelhouse")
    cmd = download["ansible.builtin.command"]
    assert "--require-hashes" in cmd and "-r {{ __offline_bundle_lock | quote }}" in cmd
    copy = next(t for t in tasks if t.get("ansible.builtin.copy", {}).get("dest")
                == "{{ __offline_bundle_lock }}")
    assert names.index(copy["name"]) < names.index(download["name"])
    variables = _yaml("roles/offline_bundle/vars/main.yml")
    assert Path(variables["__offline_bundle_lock_src"].replace(
        "{{ role_path }}", str(ROOT / "roles/offline_bundle"))).resolve() == LOCK
    # the manifest covers the Release just written, and is signed after it is written
    assert names.index(index["name"]) < names.index(write["name"]) < names.index(sign["name"])
    for t in (index, sign):
        cmd = t["ansible.builtin.shell"]
        assert "{{ __offline_bundle_gpg_sign }}" in cmd
        assert "offline_bundle_gpg_passphrase" not in cmd
        assert t["args"]["stdin"] == "passphrase:{{ offline_bundle_gpg_passphrase }}"  # not argv
        assert t["no_log"] == "{{ offline_bundle_gpg_passphrase | length > 0 }}"
    assert "--detach-sign" in sign["ansible.builtin.shell"]
    gpg = _yaml("roles/offline_bundle/vars/main.yml")["__offline_bundle_gpg_sign"]
    assert "--passphrase-fd 0" in _template(gpg, offline_bundle_gpg_key_id="K",
                                            offline_bundle_gpg_passphrase="secret")
    assert "secret" not in _template(gpg, offline_bundle_gpg_key_id="K",
                                     offline_bundle_gpg_passphrase="secret")
    assert "passphrase" not in _template(gpg, offline_bundle_gpg_key_id="K",
                                         offline_bundle_gpg_passphrase="")
    spec = _yaml("roles/offline_bundle/meta/argument_specs.yml")["argument_specs"]["main"]
    assert spec["options"]["offline_bundle_gpg_passphrase"]["no_log"] is True
