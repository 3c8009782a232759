"""hwsim packages: dpkg-deb -I / -c show the vendor names, versions and files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rackready_lab.hwsim.packages import build_packages

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


def field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True,
                          text=True, check=True).stdout.strip()


def contents(deb: Path) -> str:
    return subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def debs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("debs")
    return {field(d, "Package"): d for d in build_packages(out)}


def test_names_and_versions_as_design(debs: dict[str, Path]) -> None:
    expected = {"nvidia-open": "580.159.04-1", "nvidia-driver-cuda": "580.159.04-1",
                "nvidia-persistenced": "580.159.04-1", "nvidia-kernel-open-dkms": "580.159.04-1",
                "nvidia-fabricmanager": "580.159.04-1", "libnvidia-nscq": "580.159.04-1",
                "cuda-toolkit-13-0": "13.0.2-1", "libnccl2": "2.28.9-1+cuda13.0",
                "libnccl-dev": "2.28.9-1+cuda13.0",
                "datacenter-gpu-manager-4-core": "1:4.4.1-1",
                "datacenter-gpu-manager-4-cuda13": "1:4.4.1-1", "doca-ofed": "3.1.0-1",
                "infiniband-diags": "3.1.0-1", "ibverbs-utils": "3.1.0-1",
                "mlnx-tools": "3.1.0-1"}
    for name, version in expected.items():
        assert field(debs[name], "Version") == version, name
    assert {"mft", "nvme-cli", "pciutils"} <= set(debs)
    assert all("SIMULATED" in field(d, "Description") for d in debs.values())
    assert "nvidia-kernel-open-dkms (= 580.159.04-1)" in field(debs["nvidia-open"], "Depends")


def test_files(debs: dict[str, Path]) -> None:
    assert "./usr/bin/nvidia-smi" in contents(debs["nvidia-driver-cuda"])
    assert "nvidia-smi-q-x.xml" in contents(debs["nvidia-driver-cuda"])
    assert "./usr/local/cuda-13.0/version.json" in contents(debs["cuda-toolkit-13-0"])
    assert "./usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9" in contents(debs["libnccl2"])
    assert "./usr/include/nccl.h" in contents(debs["libnccl-dev"])
    assert "nvidia-fabricmanager.service" in contents(debs["nvidia-fabricmanager"])
    assert "./usr/sbin/ibstat" in contents(debs["infiniband-diags"])
    assert "./usr/bin/mlxconfig" in contents(debs["mft"])


def test_nccl_header_carries_version(debs: dict[str, Path], tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-x", str(debs["libnccl-dev"]), str(tmp_path)], check=True)
    h = (tmp_path / "usr/include/nccl.h").read_text()
    assert "#define NCCL_MAJOR 2" in h and "#define NCCL_MINOR 28" in h
    assert "#define NCCL_PATCH 9" in h


def test_mismatched_fabric_manager_build(tmp_path: Path) -> None:
    debs = build_packages(tmp_path, fabricmanager_version="580.126.09-1")
    versions = {field(d, "Package"): field(d, "Version") for d in debs}
    assert versions == {"nvidia-fabricmanager": "580.126.09-1",
                        "libnvidia-nscq": "580.126.09-1"}
    fm = next(d for d in debs if "fabricmanager" in d.name)
    subprocess.run(["dpkg-deb", "-x", str(fm), str(tmp_path / "x")], check=True)
    assert "580.126.09-1" in (tmp_path / "x/usr/bin/nv-fabricmanager").read_text()
