"""What the browser tier's tests share: the lab's 8-GPU node at the standard level (a
real lab run, tests/fixtures/lab-xe9680-standard) unpacked as a run directory."""

from __future__ import annotations

import lzma
import shutil
from pathlib import Path

import pytest

from rackready.site.paths import PROJECT_ROOT

LAB_STANDARD = PROJECT_ROOT / "tests" / "fixtures" / "lab-xe9680-standard"


def unpack(fixture: Path, dst: Path) -> Path:
    """A fixture run as a run directory: its .xz files decompressed beside the others."""
    for src in fixture.rglob("*"):
        if src.is_file() and src.name != "README.md":
            out = dst / src.relative_to(fixture)
            out.parent.mkdir(parents=True, exist_ok=True)
            if src.suffix == ".xz":
                out.with_suffix("").write_bytes(lzma.decompress(src.read_bytes()))
            else:
                shutil.copyfile(src, out)
    return dst


@pytest.fixture(scope="session")
def lab_standard_run(tmp_path_factory) -> Path:
    """A fresh copy of the lab 8-GPU standard run for each session (reports are built in it)."""
    return unpack(LAB_STANDARD, tmp_path_factory.mktemp("lab-standard") / "run")
