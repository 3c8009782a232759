"""The offline bundle, built for real and then used as a node's only source.

A lab node stands in for the connected staging host (the lab mirror is its
upstream): playbooks/offline_bundle.yml downloads the packages and wheels and
signs a flat repository. Another node then installs from the bundle alone,
served over HTTP as a site mirror would, with apt verifying the signature.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from rackready.lab import repo
from rackready.lab.inventory import group_vars
from rackready.provision import build_bundle

pytestmark = pytest.mark.lab

STAGING, CLIENT = "lab-gpu02", "lab-gpu01"
BUNDLE = "/srv/rackready-bundle"
PORT = 8474
KEY_NAME = "rackready-bundle-test"


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
    yield first, second
    lab.sh(STAGING, "systemctl stop rr-bundle-http", check=False)


def test_bundle_builds_and_a_rebuild_changes_nothing(bundle):
    first, second = bundle
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
    defaults = Path(__file__).resolve().parents[2] / "roles/offline_bundle/defaults/main.yml"
    packages = yaml.safe_load(defaults.read_text())["offline_bundle_packages"]
    out = _apt_from_bundle(lab, key, "install --download-only -y --no-install-recommends "
                                     + " ".join(shlex.quote(p) for p in packages))
    assert out.returncode == 0, out.stdout[-2000:]
    assert "Download complete" in out.stdout
    assert "NO_PUBKEY" not in out.stdout and "not signed" not in out.stdout


def test_a_bundle_signed_by_another_key_is_refused(provisioned_lab, bundle):
    # The lab mirror's own key did not sign the bundle: apt must refuse it.
    lab = provisioned_lab
    key = "/tmp/other-key.asc"
    lab.sh(CLIENT, f"cat > {key} <<'EOF'\n{repo.signing_key().read_text()}EOF")
    out = _apt_from_bundle(lab, key, "install --download-only -y nvidia-open")
    assert out.returncode != 0
    assert "NO_PUBKEY" in out.stdout or "not signed" in out.stdout, out.stdout[-2000:]


def test_the_wheelhouse_serves_the_validation_venv(provisioned_lab, bundle):
    lab = provisioned_lab
    wheels = lab.sh(STAGING, f"ls {BUNDLE}/wheels").stdout.split()
    assert any(w.startswith("torch-2.13.0") for w in wheels), wheels
    ip = lab.spec(STAGING).ip
    out = lab.sh(CLIENT, "rm -rf /tmp/bundle-venv && python3 -m venv /tmp/bundle-venv && "
                         f"/tmp/bundle-venv/bin/pip install -q --no-index --find-links "
                         f"http://{ip}:{PORT}/wheels/ --trusted-host {ip} pyyaml && "
                         "/tmp/bundle-venv/bin/python -c 'import yaml; print(yaml.__version__)'",
                 check=False)
    assert out.returncode == 0, out.stderr[-2000:]
