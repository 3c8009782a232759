"""Storage: fio sequential read/write where fio is installed, and a checkpoint-shaped write/read.

Needs no torch: the check runs these in its own process. The fio parser is a
pure function over fio's JSON output (`--output-format=json`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def fio_cmd(directory: Path, rw: str, size: str, numjobs: int, runtime_s: int) -> list[str]:
    return [
        "fio",
        f"--name=rackready-{rw}",
        f"--directory={directory}",
        f"--rw={rw}",
        "--bs=1M",
        f"--size={size}",
        f"--numjobs={numjobs}",
        "--ioengine=libaio",
        "--iodepth=32",
        "--direct=1",
        "--group_reporting",
        f"--runtime={runtime_s}",
        "--time_based=0",
        "--output-format=json",
    ]


def parse_fio_json(text: str) -> dict[str, float]:
    """Read and write bandwidth (GB/s, summed over jobs) from fio's JSON output."""
    doc: dict[str, Any] = json.loads(text[text.index("{") :])  # fio may print notes before the JSON
    jobs = doc.get("jobs")
    if not jobs:
        raise ValueError("fio JSON has no jobs")
    out = {}
    for kind in ("read", "write"):
        total = 0.0
        for j in jobs:
            part = j.get(kind) or {}
            # bw_bytes: bytes/s (fio >= 3.x); bw: KiB/s in every version
            total += (
                float(part["bw_bytes"]) if "bw_bytes" in part else float(part.get("bw", 0)) * 1024
            )
        out[kind] = total / 1e9
    return out


def run_fio(
    directory: Path, size: str = "8G", numjobs: int = 8, runtime_s: int = 60
) -> dict[str, float]:
    if shutil.which("fio") is None:
        raise FileNotFoundError("fio is not installed")
    res = {}
    for rw, key in (("write", "write"), ("read", "read")):  # write first: read needs the files
        p = subprocess.run(
            fio_cmd(directory, rw, size, numjobs, runtime_s),
            capture_output=True,
            text=True,
            timeout=runtime_s * 4 + 120,
            check=False,
        )
        if p.returncode != 0:
            raise RuntimeError(f"fio {rw} failed: {p.stderr.strip()[:200]}")
        res[key] = parse_fio_json(p.stdout)[key]
    for f in directory.glob("rackready-*"):
        f.unlink(missing_ok=True)
    return res


def _write_one(path: Path, nbytes: int, block: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, block[: min(len(block), left)])
        os.fsync(fd)  # the checkpoint counts as written only once it is on the device
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # so the read comes from the device
    finally:
        os.close(fd)


def _read_one(path: Path, bufsize: int) -> int:
    n = 0
    with path.open("rb", buffering=0) as f:
        buf = bytearray(bufsize)
        while (k := f.readinto(buf)) > 0:
            n += k
    return n


def checkpoint_io(
    directory: Path, files: int = 16, file_bytes: int = 1 << 30, threads: int = 16
) -> dict[str, float]:
    """Write then read `files` files in parallel, like shards of a checkpoint; GB/s each way."""
    work = directory / f"rackready-ckpt-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    block = os.urandom(min(file_bytes, 16 << 20))
    paths = [work / f"shard{i:03d}.bin" for i in range(files)]
    try:
        with ThreadPoolExecutor(threads) as ex:
            t0 = time.perf_counter()
            list(ex.map(lambda p: _write_one(p, file_bytes, block), paths))
            tw = time.perf_counter() - t0
            t0 = time.perf_counter()
            got = sum(ex.map(lambda p: _read_one(p, 16 << 20), paths))
            tr = time.perf_counter() - t0
        if got != files * file_bytes:
            raise RuntimeError(f"read back {got} of {files * file_bytes} bytes")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = files * file_bytes
    return {"write": total / tw / 1e9, "read": total / tr / 1e9}
