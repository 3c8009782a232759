"""The offline bundle, built for real and then used as a node's only source.

A lab node stands in for the connected staging host (the lab mirror is its
upstream): playbooks/offline_bundle.yml downloads the packages and wheels and
signs a flat repository. Another node then installs from the bundle alone,
served over HTTP as a site mirror would, with apt verifying the signature, and
builds the node venv from the bundle's wheelhouse alone and validates from it.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from pathlib import Path

import pytest
import yaml

from rackready import bundle as bundle_mod
from rackready import inventory, ssh, validate
from rackready.lab import repo
from rackready.lab.inventory import group_vars
from rackready.node_session import build_remote_command, ship_bundle
from rackready.offline_manifest import manifest
from rackready.provision import build_bundle
from rackready.rundir import new_run_id
from rackready.validate import NODE_BASE

pytestmark = pytest.mark.lab

STAGING, CLIENT = "lab-gpu02", "lab-gpu01"
BUNDLE = "/srv/rackready-bundle"
PORT = 8474
KEY_NAME = "rackready-bundle-test"
VENV = "/var/tmp/bundle-venv"  # a node venv built from the bundle alone


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


def test_a_bare_node_installs_everything_from_the_bundle_alone(provisioned_lab, bundle):
    lab = provisioned_lab
    key = "/tmp/bundle-key.asc"
    lab.sh(CLIENT, f"python3 -c \"import urllib.request as u; u.urlretrieve("
                   f"'http://{lab.spec(STAGING).ip}:{PORT}/bundle-key.asc', '{key}')\"")
    # what `invoke bundle` derived from the node roles' variables for the staging host
    packages = manifest(bundle[2], STAGING).packages
    out = _apt_from_bundle(lab, key, "install --download-only -y --no-install-recommends "
                                     + " ".join(shlex.quote(p) for p in packages))
    assert out.returncode == 0, out.stdout[-2000:]
    assert "Download complete" in out.stdout
    assert "NO_PUBKEY" not in out.stdout and "not signed" not in out.stdout


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


def test_a_node_venv_built_from_the_bundle_alone_validates(provisioned_lab, bundle):
    lab = provisioned_lab
    # The bundle carries the one requirements file and a wheel for every line of it.
    assert lab.sh(STAGING, f"cat {BUNDLE}/node-requirements.txt").stdout == \
        repo.NODE_REQUIREMENTS.read_text()
    wheels = [w.lower() for w in lab.sh(STAGING, f"ls {BUNDLE}/wheels").stdout.split()]
    requirements = repo.node_requirements()
    for req in requirements:
        assert any(w.startswith(_wheel_prefix(req)) for w in wheels), (req, wheels)
    ip = lab.spec(STAGING).ip
    served = f"http://{ip}:{PORT}"
    node = inventory.find(CLIENT, "lab")
    payload = bundle_mod.build()
    client = ssh.connect(node)
    try:
        # A fresh venv from the bundle alone (--no-index): the whole file, nothing else;
        # as the inventory reaches the node (admin through the jump host, sudo).
        build = (
            f"rm -rf {VENV} {VENV}.txt && python3 -m venv {VENV} && "
            f"python3 -c \"import urllib.request as u; u.urlretrieve("
            f"'{served}/node-requirements.txt', '{VENV}.txt')\" && "
            f"{VENV}/bin/pip install -q --no-index --find-links {served}/wheels/ "
            f"--trusted-host {ip} -r {VENV}.txt && "
            f"{VENV}/bin/python -c 'import torch, numpy, yaml, pynvml' && "
            f"{VENV}/bin/pip freeze"
        )
        rc, out, err = ssh.run(client, build_remote_command(build, become=node.become),
                               timeout_s=900)
        assert rc == 0, (out + err)[-2000:]
        frozen = {line.split("==")[0].lower(): line.split("==")[1]
                  for line in out.splitlines() if "==" in line}
        for req in requirements:
            name, version = req.split("==")
            # a local build (2.13.0+cpu, +cu130) satisfies the pin
            assert frozen.get(name.lower(), "").split("+")[0] == version, (req, frozen)

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
        rc, out, err = ssh.run(client, build_remote_command(suite, become=node.become),
                               timeout_s=360)
    finally:
        client.close()
    assert rc == 0, err[-2000:]
    status, _, text = out.partition("\n")
    assert status == "rc=0", (out + err)[-2000:]
    result = json.loads(text)
    assert result["only"] == ["kernel.cmdline"]
    assert result["bundle_sha256"] == payload[1]
    assert [(c["check"], c["status"]) for c in result["checks"]] == [("kernel.cmdline", "ok")]
    assert result["outcome"] == "PASS", [v for v in result["verdicts"] if v["outcome"] == "fail"]
