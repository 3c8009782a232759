"""The validation bundle shipped to nodes: the validation/ package, hashed.

The archive is built reproducibly (sorted names, fixed mtime and owner), so
the same source gives the same SHA-256, which each result records.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "validation"
SUFFIXES = {".py", ".yml", ".yaml", ".json", ".txt"}


def files() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
    )


def build() -> tuple[bytes, str]:
    """Return (tar.gz bytes, sha256 of the uncompressed tar)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files():
            data = path.read_bytes()
            info = tarfile.TarInfo(str(path.relative_to(PACKAGE.parent)))
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    tar_bytes = raw.getvalue()
    digest = hashlib.sha256(tar_bytes).hexdigest()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0) as f:
        f.write(tar_bytes)
    return gz.getvalue(), digest
