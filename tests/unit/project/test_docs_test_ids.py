"""The docs that cite tests (docs/reliability.md, README.md) cite tests that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
CITED = re.compile(r"`((?:unit|lab|browser|gpu)/(?:\w+/)*test_\w+\.py)(?:::(test_\w+))?`")


def missing_tests(doc: Path, tests: Path) -> tuple[int, list[str]]:
    """(how many citations, the ones naming no file or no such test function)."""
    refs = CITED.findall(doc.read_text())
    missing = []
    for path, name in refs:
        file = tests / path
        if not file.is_file():
            missing.append(path)
        elif name and not re.search(rf"^def {name}\(", file.read_text(), re.M):
            missing.append(f"{path}::{name}")
    return len(refs), missing


# README.md's support matrix rests each "lab" and "unit" claim on the tests it cites.
@pytest.mark.parametrize(("doc", "least"), [("docs/reliability.md", 20), ("README.md", 20)])
def test_every_cited_test_exists(doc, least):
    count, missing = missing_tests(ROOT / doc, ROOT / "tests")
    assert count >= least, "the page cites its tests"
    assert missing == []


def test_a_missing_test_is_caught(tmp_path):
    (tmp_path / "unit").mkdir()
    (tmp_path / "unit" / "test_a.py").write_text("def test_here():\n    pass\n")
    doc = tmp_path / "d.md"
    doc.write_text("`unit/test_a.py::test_here` `unit/test_a.py::test_gone` `lab/test_b.py`")
    assert missing_tests(doc, tmp_path) == (3, ["unit/test_a.py::test_gone", "lab/test_b.py"])
