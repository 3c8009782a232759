"""The offline bundle, built for real and then used as a node's only source.

A lab node stands in for the connected staging host (the lab mirror is its
upstream): playbooks/offline_bundle.yml downloads the packages and wheels and
signs a flat repository, pins every wheel by hash and signs the bundle's manifest.
Another node then installs every package of the bundle from it alone, served over HTTP
as a site mirror would, with apt verifying the signature (for real, into a bare Debian
root on that node: see test_a_bare_node_installs_everything_from_the_bundle_alone);
the validation_tools role builds the node
venv from the bundle alone (the signed manifest and every file checked, then
`pip install --require-hashes --no-index`) and validates from it; a bundle with one
wheel swapped for another file of the same name is refused, naming the wheel, with
nothing installed.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rackready.remote import bundle as bundle_mod
from rackready.remote import ssh
from rackready.remote.runner import build_remote_command, run_command
from rackready.remote.session import ship_bundle
from rackready.run.rundir import new_run_id
from rackready.site import inventory
from rackready.steps import validate
from rackready.steps.offline_manifest import KERNEL_FACT, manifest
from rackready.steps.provision import build_bundle, run_playbook
from rackready.steps.validate import NODE_BASE
from rackready_lab import repo, rootfs
from rackready_lab.inventory import group_vars

pytestmark = pytest.mark.lab

STAGING, CLIENT = "lab-gpu02", "lab-gpu01"
BUNDLE = "/srv/rackready-bundle"
PORT = 8474
KEY_NAME = "rackready-bundle-test"
VENV = "/var/tmp/bundle-venv"  # a node venv built from the bundle alone
# validation_tools keeps the verified bundle beside the venv (<dirname>/bundle): the swapped
# bundle gets a folder of its own, so no good copy verified earlier is reused.
SWAPPED_VENV = "/var/tmp/swapped/venv"
BUNDLE_KEY = "/tmp/bundle-key.asc"  # the key the bundle is signed with, on the client


@pytest.fixture(scope="module")
def bundle(provisioned_lab, tmp_path_factory):
    lab = provisioned_lab
    # The role's one prerequisite: a signing key already on the staging host.
    lab.sh(STAGING, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnupg >/dev/null")
    lab.sh(STAGING, f"gpg --list-secret-keys {KEY_NAME} >/dev/null 2>&1 || gpg --batch "
                    f"--passphrase '' --quick-gen-key {KEY_NAME} default sign never")
    fpr = lab.sh(STAGING, f"gpg --with-colons --list-secret-keys {KEY_NAME} "
                          "| awk -F: '/^fpr/ {print $10; exit}'").stdout.strip()
    inv = tmp_path_factory.mktemp("staging") / "hosts.yml"
    staging = {"ansible_host": lab.spec(STAGING).ip}
    inv.write_text(yaml.safe_dump({"all": {"vars": group_vars(), "children": {
        "staging": {"hosts": {STAGING: staging}}}}}))
    # what `invoke bundle --inventory INV --key-id FPR --dir ... --wheelhouse ...` runs
    args = {"key_id": fpr, "bundle_dir": BUNDLE, "wheelhouse": f"{repo.url()}/wheels/",
            "quiet": True}
    first = build_bundle(inv, **args)
    second = build_bundle(inv, **args)
    # Serve it as the site mirror would; stopped when the module is done.
    lab.sh(STAGING, f"systemd-run --unit rr-bundle-http python3 -m http.server {PORT} "
                    f"--directory {BUNDLE} >/dev/null")
    yield first, second, inv
    lab.sh(STAGING, "systemctl stop rr-bundle-http", check=False)


def test_bundle_builds_and_a_rebuild_changes_nothing(bundle):
    first, second, _ = bundle
    assert first.rc == 0, first.failures
    assert second.rc == 0, second.failures
    assert second.changed() == {STAGING: 0}


def _apt_from_bundle(lab, key: str, args: str):
    """apt on the client with the bundle as its only source and a bare dpkg status."""
    root = "/tmp/bundle-apt"
    staging_ip = lab.spec(STAGING).ip
    opts = (f"-o Dir::Etc::SourceList={root}/sources.list "
            f"-o Dir::Etc::SourceParts={root}/sources.list.d "
            f"-o Dir::State::Lists={root}/lists -o Dir::Cache::archives={root}/archives "
            f"-o Dir::State::status={root}/status -o APT::Get::List-Cleanup=0")
    setup = (
        f"rm -rf {root} && mkdir -p {root}/lists/partial {root}/archives/partial "
        f"{root}/sources.list.d && "
        f": > {root}/status && "
        f"echo 'deb [signed-by={key}] http://{staging_ip}:{PORT}/debs ./' > {root}/sources.list"
    )
    return lab.sh(CLIENT, f"{setup} && apt-get {opts} update 2>&1 && apt-get {opts} {args} 2>&1",
                  check=False)


def _long(name: str, script: str, timeout_s: float):
    """A root command on a lab node that may outlast lab.sh's two minutes (bounded too)."""
    node = inventory.find(name, "lab")
    client = ssh.connect(node)
    try:
        return run_command(client, build_remote_command(script, become=node.become),
                           timeout_s=timeout_s, idle_s=timeout_s, max_stdout=16 << 20,
                           max_stderr=16 << 20)
    finally:
        client.close()


BARE = "/var/tmp/rr-bare-root"  # on the client: a bare Debian root, removed after the test


def test_a_bare_node_installs_everything_from_the_bundle_alone(provisioned_lab, bundle):
    """apt-get install, for real, of every package `invoke bundle` derived from the node
    roles, with the bundle as the only source (apt checking its signature), into a bare
    Debian root on the client: the lab's own base image (what every lab node was built
    from), copied into the client and entered with chroot there, so the packages unpack,
    their maintainer scripts run (the DKMS build of the driver's modules included) and
    dpkg records them as installed. Not into the client's own root: it is provisioned
    and shared, and reinstalling there would run the stand-ins' prerm/postinst (dkms
    remove/install, systemctl enable) under the other tests; the bare root leaves the
    node as they expect (no service starts: policy-rc.d says no, and no systemd runs
    in the root). Copying the image (~350 MB) and the install took 18.9 s on a loaded
    controller (2026-12-05); the bundle's whole closure is what it proves."""
    lab = provisioned_lab
    staging_ip = lab.spec(STAGING).ip
    kernel = lab.sh(STAGING, "uname -r").stdout.strip()
    packages = [p.replace(KERNEL_FACT, kernel) for p in manifest(bundle[2], STAGING).packages]
    assert f"linux-headers-{kernel}" in packages
    debs = lab.sh(STAGING, f"ls {BUNDLE}/debs").stdout.split()
    assert [d for d in debs if d.startswith(f"linux-headers-{kernel}_")], debs
    base, root = rootfs.cached_rootfs(), lab.spec(CLIENT).root / BARE.lstrip("/")
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run(["cp", "-a", f"{base}/.", str(root)], check=True, timeout=300)
    quoted = " ".join(shlex.quote(p) for p in packages)
    try:
        lab.sh(CLIENT, f"mount --bind /dev {BARE}/dev && mount -t proc proc {BARE}/proc")
        # the bundle is the root's only source; its key as a site installs the mirror's
        out = _long(CLIENT, (
            f"rm -f {BARE}/etc/apt/sources.list.d/* && python3 -c \"import urllib.request "
            f"as u; u.urlretrieve('http://{staging_ip}:{PORT}/bundle-key.asc', "
            f"'{BARE}/etc/apt/keyrings/bundle.asc')\" && echo 'deb [signed-by=/etc/apt/"
            f"keyrings/bundle.asc] http://{staging_ip}:{PORT}/debs ./' > "
            f"{BARE}/etc/apt/sources.list && printf '#!/bin/sh\\nexit 101\\n' > "
            f"{BARE}/usr/sbin/policy-rc.d && chmod 755 {BARE}/usr/sbin/policy-rc.d && "
            f"chroot {BARE} apt-get update 2>&1 && DEBIAN_FRONTEND=noninteractive chroot "
            f"{BARE} apt-get install -y -q --no-install-recommends {quoted} 2>&1"),
            600)
        assert out.rc == 0, (out.problem, out.out[-3000:])
        assert "NO_PUBKEY" not in out.out and "not signed" not in out.out
        # installed, not only downloaded: unpacked and configured by dpkg
        summary = re.search(r"^(\d+) upgraded, (\d+) newly installed.*$", out.out, re.M)
        assert summary and int(summary[2]) >= len(packages) // 2, out.out[-3000:]
        assert "Setting up nvidia-kernel-open-dkms" in out.out, out.out[-3000:]
        # every package came from the bundle, none from anywhere else
        fetched = re.findall(r"^Get:\d+ (\S+)", out.out, re.M)
        assert fetched and set(fetched) == {f"http://{staging_ip}:{PORT}/debs"}, set(fetched)
        names = [re.split(r"[=]", p)[0] for p in packages]
        state = lab.sh(CLIENT, f"chroot {BARE} dpkg-query -W -f '${{Package}} ${{Version}} "
                               f"${{db:Status-Status}}\\n' {' '.join(names)}").stdout
        installed = {ln.split()[0]: ln.split()[1:] for ln in state.splitlines()}
        for pin in packages:
            name, _, version = pin.partition("=")
            got, status = installed.get(name, ["", ""])
            assert status == "installed", (name, state)
            assert re.fullmatch(re.escape(version).replace(r"\*", ".*"), got) \
                if version else got, (pin, got)
        # the driver's DKMS postinst ran in the root, against the bundle's headers
        dkms = lab.sh(CLIENT, f"chroot {BARE} dkms status", check=False).stdout
        assert "nvidia" in dkms and "installed" in dkms, dkms
    finally:
        lab.sh(CLIENT, f"umount {BARE}/proc; umount {BARE}/dev; true", check=False)
        if lab.sh(CLIENT, f"mountpoint -q {BARE}/dev || mountpoint -q {BARE}/proc",
                  check=False).returncode != 0:  # never remove through a live /dev
            shutil.rmtree(root, ignore_errors=True)


def test_nccl_tests_comes_from_the_bundle_at_the_pinned_release(provisioned_lab, bundle):
    # The lab installs nccl-tests as the prebuilt package (validation_tools_nccl_tests_package):
    # the bundle carries it at validation_tools_nccl_tests_version, and a bare node gets it
    # from the bundle alone.
    lab = provisioned_lab
    defaults = Path(__file__).resolve().parents[2] / "roles/validation_tools/defaults/main.yml"
    version = yaml.safe_load(defaults.read_text())["validation_tools_nccl_tests_version"]
    assert f"nccl-tests={version}-*" in manifest(bundle[2], STAGING).packages
    debs = lab.sh(STAGING, f"ls {BUNDLE}/debs").stdout.split()
    assert [d for d in debs if d.startswith(f"nccl-tests_{version}-")], debs
    key = "/tmp/bundle-key-nccl-tests.asc"
    lab.sh(CLIENT, f"python3 -c \"import urllib.request as u; u.urlretrieve("
                   f"'http://{lab.spec(STAGING).ip}:{PORT}/bundle-key.asc', '{key}')\"")
    out = _apt_from_bundle(lab, key, "install --download-only -y --no-install-recommends "
                                     f"'nccl-tests={version}-*'")
    assert out.returncode == 0, out.stdout[-2000:]
    # apt's "Get:1 http://.../debs ./ nccl-tests 2.19.6-1+hwsim1 [...]": from the bundle
    assert f" nccl-tests {version}-" in out.stdout, out.stdout[-2000:]


def test_a_bundle_signed_by_another_key_is_refused(provisioned_lab, bundle):
    # The lab mirror's own key did not sign the bundle: apt must refuse it.
    lab = provisioned_lab
    key = "/tmp/other-key.asc"
    lab.sh(CLIENT, f"cat > {key} <<'EOF'\n{repo.signing_key().read_text()}EOF")
    out = _apt_from_bundle(lab, key, "install --download-only -y nvidia-open")
    assert out.returncode != 0
    assert "NO_PUBKEY" in out.stdout or "not signed" in out.stdout, out.stdout[-2000:]


def _wheel_prefix(requirement: str) -> str:
    """torch==2.13.0 -> torch-2.13.0 (wheel file names: normalized name, then version)."""
    name, version = requirement.split("==")
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}"


def _bundle_key_on_client(lab) -> None:
    # a site has it already: package_sources installed it as the mirror's apt key
    lab.sh(CLIENT, f"python3 -c \"import urllib.request as u; u.urlretrieve("
                   f"'http://{lab.spec(STAGING).ip}:{PORT}/bundle-key.asc', '{BUNDLE_KEY}')\"")


def _validation_tools_from_bundle(lab, venv: str):
    """The validation_tools role on the client, with the bundle as its only source of
    wheels (what a site's inventory sets: validation_tools_bundle_url)."""
    return run_playbook(lab.inventory, "validation_tools.yml", limit=CLIENT, quiet=True,
                        extravars={"validation_tools_bundle_url":
                                   f"http://{lab.spec(STAGING).ip}:{PORT}/",
                                   "validation_tools_bundle_key": BUNDLE_KEY,
                                   "validation_tools_venv": venv})


def test_the_bundle_pins_every_wheel_by_hash_in_a_signed_manifest(provisioned_lab, bundle):
    lab = provisioned_lab
    wheels = sorted(lab.sh(STAGING, f"ls {BUNDLE}/wheels").stdout.split())
    pinned = lab.sh(STAGING, f"cat {BUNDLE}/node-requirements.hashes.txt").stdout
    lines = [ln for ln in pinned.splitlines() if ln and not ln.startswith("#")]
    assert all("==" in ln and "--hash=sha256:" in ln for ln in lines), lines
    assert sum(ln.count("--hash=sha256:") for ln in lines) == len(wheels)
    doc = json.loads(lab.sh(STAGING, f"cat {BUNDLE}/manifest.json").stdout)
    assert {f"wheels/{w}" for w in wheels} <= set(doc["files"])
    assert {"node-requirements.txt", "node-requirements.hashes.txt", "debs/Release"} <= \
        set(doc["files"])
    for rel in ("wheels/" + wheels[0], "debs/Release", "node-requirements.hashes.txt"):
        digest = lab.sh(STAGING, f"sha256sum {BUNDLE}/{rel}").stdout.split()[0]
        assert doc["files"][rel]["sha256"] == digest, rel
    # signed by the repository's key (detached), as the node checks it
    out = lab.sh(STAGING, f"gpg --verify {BUNDLE}/manifest.json.asc {BUNDLE}/manifest.json 2>&1",
                 check=False)
    assert out.returncode == 0 and "Good signature" in out.stdout, out.stdout


def test_a_node_venv_built_from_the_bundle_alone_validates(provisioned_lab, bundle):
    lab = provisioned_lab
    # The bundle carries the one requirements file and a wheel for every line of it.
    assert lab.sh(STAGING, f"cat {BUNDLE}/node-requirements.txt").stdout == \
        repo.NODE_REQUIREMENTS.read_text()
    wheels = [w.lower() for w in lab.sh(STAGING, f"ls {BUNDLE}/wheels").stdout.split()]
    requirements = repo.node_requirements()
    for req in requirements:
        assert any(w.startswith(_wheel_prefix(req)) for w in wheels), (req, wheels)
    _bundle_key_on_client(lab)
    # A fresh venv from the bundle alone, by the role a site runs: the signed manifest and
    # every file checked, then pip install --require-hashes --no-index from the verified
    # wheels; a second run changes nothing.
    lab.sh(CLIENT, f"rm -rf {VENV} {posixpath.dirname(VENV)}/bundle")
    first = _validation_tools_from_bundle(lab, VENV)
    assert first.rc == 0, first.failures
    second = _validation_tools_from_bundle(lab, VENV)
    assert second.rc == 0, second.failures
    assert second.changed() == {CLIENT: 0}
    out = lab.sh(CLIENT, f"{VENV}/bin/python -c 'import torch, numpy, yaml, pynvml' && "
                         f"{VENV}/bin/pip freeze")
    frozen = {line.split("==")[0].lower(): line.split("==")[1]
              for line in out.stdout.splitlines() if "==" in line}
    for req in requirements:
        name, version = req.split("==")
        # a local build (2.13.0+cpu, +cu130) satisfies the pin
        assert frozen.get(name.lower(), "").split("+")[0] == version, (req, frozen)
    # what pip installed is exactly the verified wheels (their hashes pinned)
    cached = lab.sh(CLIENT, f"ls {posixpath.dirname(VENV)}/bundle/wheels").stdout.split()
    assert sorted(w.lower() for w in cached) == sorted(wheels)

    node = inventory.find(CLIENT, "lab")
    payload = bundle_mod.build()
    client = ssh.connect(node)
    try:
        # validate from that venv: the verified suite bundle, run as `invoke validate` runs it
        bundle_dir = ship_bundle(client, payload, remote_base=NODE_BASE,
                                 run_id=new_run_id("bundle-venv"), become=node.become)
        rdir = posixpath.dirname(bundle_dir)  # the run folder; the bundle stays as verified
        args = validate._suite_args(node, "quick", ["--only", "kernel.cmdline"])
        suite = (
            f"printf %s {shlex.quote(yaml.safe_dump(validate._site(node)))} > {rdir}/site.yml"
            f" && cd {shlex.quote(bundle_dir)} && RACKREADY_BUNDLE_SHA256={payload[1]} "
            f"timeout 300 {VENV}/bin/python {shlex.join(args)} --out {rdir}/out "
            f"--site {rdir}/site.yml > {rdir}/suite.log 2>&1; echo rc=$?; "
            f"cat {rdir}/suite.log >&2; cat {rdir}/out/result.json"
        )
        res = run_command(client, build_remote_command(suite, become=node.become),
                          timeout_s=360, idle_s=360, max_stdout=16 << 20, max_stderr=16 << 20)
    finally:
        client.close()
    out, err = res.out, res.err
    assert res.rc == 0, (res.problem + err)[-2000:]
    status, _, text = out.partition("\n")
    assert status == "rc=0", (out + err)[-2000:]
    result = json.loads(text)
    assert result["only"] == ["kernel.cmdline"]
    assert result["bundle_sha256"] == payload[1]
    assert [(c["check"], c["status"]) for c in result["checks"]] == [("kernel.cmdline", "ok")]
    assert result["outcome"] == "PASS", [v for v in result["verdicts"] if v["outcome"] == "fail"]


def test_a_bundle_with_a_swapped_wheel_is_refused_naming_it(provisioned_lab, bundle):
    # Whoever can write the mirror swaps one wheel for another file of the same name: the
    # node refuses the bundle, naming that wheel, and installs nothing from it.
    lab = provisioned_lab
    _bundle_key_on_client(lab)
    wheels = lab.sh(STAGING, f"ls {BUNDLE}/wheels").stdout.split()
    victim = next(w for w in wheels if w.lower().startswith("nvidia_ml_py-"))
    path = f"{BUNDLE}/wheels/{victim}"
    lab.sh(STAGING, f"cp -p {path} /var/tmp/{victim}.orig && printf 'swapped' >> {path}")
    root = posixpath.dirname(SWAPPED_VENV)
    try:
        lab.sh(CLIENT, f"rm -rf {root}")
        refused = _validation_tools_from_bundle(lab, SWAPPED_VENV)
    finally:
        lab.sh(STAGING, f"mv -f /var/tmp/{victim}.orig {path}")
    assert refused.rc != 0
    reason = refused.failures.get(CLIENT, "")
    assert "Verify the offline bundle" in reason and f"wheels/{victim}" in reason, reason
    assert "nothing from the bundle was installed" in reason, reason
    # nothing installed: no venv, and the swapped file never entered the verified folder
    left = lab.sh(CLIENT, f"test -e {SWAPPED_VENV} && echo venv; "
                          f"test -e {root}/bundle/wheels/{victim} && echo wheel; true")
    assert left.stdout.strip() == "", left.stdout
