"""The validation bundle is reproducible and holds the whole node-side suite."""

from __future__ import annotations

import gzip
import io
import tarfile

from rackready.remote import bundle


def test_same_source_gives_the_same_hash():
    _, a = bundle.build()
    _, b = bundle.build()
    assert a == b and len(a) == 64


def test_bundle_holds_the_validation_package_and_nothing_compiled():
    payload, _ = bundle.build()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(payload))) as tar:
        names = tar.getnames()
    assert "validation/__main__.py" in names
    assert "validation/model.py" in names
    assert any(n.startswith("validation/profiles/") and n.endswith(".yml") for n in names)
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


def test_a_changed_file_changes_the_hash(tmp_path, monkeypatch):
    src = tmp_path / "validation"
    src.mkdir()
    (src / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(bundle, "PACKAGE", src)
    _, before = bundle.build()
    (src / "a.py").write_text("x = 2\n")
    _, after = bundle.build()
    assert before != after
