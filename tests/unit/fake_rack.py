"""A rack of in-process SSH nodes (fake_node.FakeNode) that the real controller validates:
one machine plays every node, each in its own remote folder, running a stand-in suite
(`python -m validation run ...` from a bundle that holds only the test's own script).

The trust tests (test_hostile_node_data, test_hostile_events, test_hostile_bmc) drive
`rackready.steps.validate.run_validation` through it; the rack step, which needs real
rails, is tested in test_rack_checks.py and left out here."""

from __future__ import annotations

import gzip
import hashlib
import io
import sys
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from rackready.remote import bundle
from rackready.remote import session as node_session
from rackready.site.inventory import Node, provisioned
from rackready.steps import rack as rack_step
from rackready.steps import validate


def suite_bundle(suite: str) -> Callable[[], tuple[bytes, str]]:
    """bundle.build's stand-in: a bundle whose `python -m validation` is `suite`."""
    def build() -> tuple[bytes, str]:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            for name, text in (("validation/__init__.py", ""),
                               ("validation/__main__.py", suite)):
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        tar_bytes = raw.getvalue()
        return gzip.compress(tar_bytes, mtime=0), hashlib.sha256(tar_bytes).hexdigest()
    return build


def provisioned_roles(tmp_path: Path) -> dict[str, Any]:
    """The roles' variables as provisioned, this interpreter as the node venv's python."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    return {**provisioned({}, Path("roles")), "validation_tools_venv": str(venv.parent)}


def play_every_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                    nodes: Mapping[str, Node], suite: str) -> None:
    """validate finds exactly `nodes` (any inventory name), ships `suite`, and runs each
    node in tmp_path/<node>/b on the one fake machine; no rack step."""
    real = node_session.run_on_node

    def on_its_own_folder(client, node_name, **kw):
        return real(client, node_name, **{**kw, "remote_base": str(tmp_path / node_name / "b")})

    monkeypatch.setattr(node_session, "run_on_node", on_its_own_folder)
    monkeypatch.setattr(validate, "_load", lambda inv: list(nodes.values()))
    monkeypatch.setattr(validate, "_find", lambda name, inv: nodes[name])
    monkeypatch.setattr(bundle, "build", suite_bundle(suite))
    monkeypatch.setattr(rack_step, "run_rack_step", lambda *a, **k: {"groups": []})
