"""Build the hwsim stand-in .deb packages (controller side).

Names, versions and dependencies are the vendors' (docs/design.md); the
contents are the stand-in tools. Each package carries its own copy of the
stdlib-only hwsim code under /usr/lib/hwsim/<package>/ so no two packages
own the same file and no extra helper package is needed.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVER = "580.159.04-1"
DCGM = "1:4.4.1-1"
DOCA = "3.1.0-1"
NCCL = "2.28.9-1+cuda13.0"
CUDA = "13.0.2-1"
DKMS = "3.0.10-8+hwsim1"
MOKUTIL = "0.6.0-2+hwsim1"
NCCL_TESTS = "2.19.6-1+hwsim1"  # the release validation_tools_nccl_tests_version pins
NCCL_TESTS_DIR = "/opt/rackready/nccl-tests"  # validation_tools_nccl_tests_dir's default
MAINTAINER = "rackready lab <lab@rackready.invalid>"


class PackageError(RuntimeError):
    """dpkg-deb missing or failing: one line for the person running the build."""


@dataclass
class Pkg:
    name: str
    version: str
    description: str
    depends: list[str] = field(default_factory=list)
    tools: dict[str, str] = field(default_factory=dict)  # installed path -> module (cli.x)
    files: dict[str, str] = field(default_factory=dict)  # installed path -> content
    units: dict[str, str] = field(default_factory=dict)  # unit name -> content
    postinst: str = ""
    prerm: str = ""
    with_lib: bool = False


def _wrapper(pkg: str, module: str, args: list[str]) -> str:
    return (f"#!/usr/bin/python3\n# hwsim stand-in (SIMULATED), package {pkg}\nimport sys\n\n"
            f"sys.path.insert(0, '/usr/lib/hwsim/{pkg}')\n"
            f"from hwsim.cli.common import run  # noqa: E402\n"
            f"from hwsim.{module} import main  # noqa: E402\n\n"
            f"sys.exit(run(lambda argv: main({args!r} + argv)))\n")


# Boot-state units stand for what firmware and drivers do at power-on, so they run
# before anything that configures or uses the devices (daemons, the RoCE unit).
BOOT_BEFORE = ("Before=network-pre.target nvidia-persistenced.service "
               "nvidia-fabricmanager.service nvidia-dcgm.service\nWants=network-pre.target\n")


def _unit(desc: str, exec_start: str, after: str = "", kind: str = "simple",
          before: str = "") -> str:
    restart = "Restart=on-failure\nRestartSec=3\n" if kind == "simple" else \
        "RemainAfterExit=yes\n"
    return (f"[Unit]\nDescription={desc} (hwsim, SIMULATED)\n"
            f"After=local-fs.target {after}\n{before}StartLimitIntervalSec=0\n\n"
            f"[Service]\nType={kind}\nExecStart={exec_start}\n{restart}\n"
            "[Install]\nWantedBy=multi-user.target\n")


SHIM_POSTINST = ("[ -e /usr/local/sbin/modprobe ] || install -D -m 0755 "
                 "/usr/lib/hwsim/{pkg}/bin/modprobe /usr/local/sbin/modprobe\n")
# As the real DKMS package's postinst: build (and, if dkms is configured to, sign)
# the modules for the running kernel.
DKMS_MODULE = DRIVER.split("-")[0]
DKMS_POSTINST = f'dkms install -m nvidia -v {DKMS_MODULE} -k "$(uname -r)"\n'
DKMS_PRERM = f'dkms remove -m nvidia -v {DKMS_MODULE} -k "$(uname -r)" || true\n'


def package_specs(fabricmanager_version: str = DRIVER) -> list[Pkg]:
    fm = fabricmanager_version
    nccl_h = ("/* hwsim stand-in (SIMULATED): version macros as in NCCL's nccl.h */\n"
              "#ifndef NCCL_H_\n#define NCCL_H_\n#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n"
              "#define NCCL_PATCH 9\n#define NCCL_SUFFIX \"\"\n#define NCCL_VERSION_CODE 22809\n"
              "#endif\n")
    cuda_json = ('{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "13.0.2"\n   },\n'
                 '   "cuda_nvcc" : {\n      "name" : "CUDA NVCC",\n      "version" : "13.0.88"\n'
                 '   }\n}\n')
    nvcc = ("#!/bin/sh\n# hwsim stand-in (SIMULATED)\n"
            "echo 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
            "echo 'Copyright (c) 2005-2025 NVIDIA Corporation'\n"
            "echo 'Cuda compilation tools, release 13.0, V13.0.88'\n"
            "echo 'Build cuda_13.0.r13.0/compiler.36424714_0'\n")
    gpu_mods = "nvidia nvidia_modeset nvidia_uvm nvidia_drm nvidia_peermem\n"
    return [
        Pkg("dkms", DKMS, "Dynamic Kernel Module System (build and sign stand-in modules)",
            with_lib=True,
            tools={"/usr/sbin/dkms": "cli.dkms",
                   "/usr/lib/linux-kbuild-6.1/scripts/sign-file": "cli.sign_file"}),
        Pkg("mokutil", MOKUTIL, "tools for manipulating machine owner keys (Secure Boot)",
            with_lib=True, tools={"/usr/bin/mokutil": "cli.mokutil"}),
        Pkg("nvidia-kernel-open-dkms", DRIVER, "NVIDIA open kernel modules (DKMS)",
            with_lib=True, depends=["dkms"], prerm=DKMS_PRERM,
            files={"/usr/lib/hwsim/modules.d/nvidia-kernel-open-dkms.list": gpu_mods,
                   "/usr/lib/hwsim/modules.d/nvidia-kernel-open-dkms.autoload":
                       "nvidia nvidia_modeset nvidia_uvm nvidia_drm\n"},
            tools={"/usr/lib/hwsim/nvidia-kernel-open-dkms/bin/modprobe": "cli.modprobe",
                   "/usr/lib/hwsim/nvidia-kernel-open-dkms/bin/hwsim-boot": "cli.boot"},
            units={"hwsim-boot-gpu.service": _unit(
                "Simulated GPU state at boot",
                "/usr/lib/hwsim/nvidia-kernel-open-dkms/bin/hwsim-boot gpu", kind="oneshot",
                before=BOOT_BEFORE)},
            postinst=SHIM_POSTINST.format(pkg="nvidia-kernel-open-dkms") + DKMS_POSTINST),
        Pkg("nvidia-driver-cuda", DRIVER, "NVIDIA driver CUDA integration (nvidia-smi)",
            with_lib=True, tools={"/usr/bin/nvidia-smi": "cli.nvidia_smi"}),
        Pkg("nvidia-persistenced", DRIVER, "NVIDIA persistence daemon", with_lib=True,
            depends=[f"nvidia-driver-cuda (= {DRIVER})"],
            tools={"/usr/bin/nvidia-persistenced": "services.daemon:nvidia-persistenced"},
            units={"nvidia-persistenced.service": _unit(
                "NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced",
                "hwsim-boot-gpu.service")}),
        Pkg("nvidia-open", DRIVER, "NVIDIA driver metapackage (open kernel modules)",
            depends=[f"nvidia-kernel-open-dkms (= {DRIVER})", f"nvidia-driver-cuda (= {DRIVER})",
                     f"nvidia-persistenced (= {DRIVER})"]),
        Pkg("libnvidia-nscq", fm, "NVSwitch configuration and query library",
            files={f"/usr/lib/x86_64-linux-gnu/libnvidia-nscq.so.{fm.split('-')[0]}": ""}),
        Pkg("nvidia-fabricmanager", fm, "NVIDIA Fabric Manager", with_lib=True,
            depends=[f"libnvidia-nscq (= {fm})"],
            tools={"/usr/bin/nv-fabricmanager":
                   f"services.daemon:nvidia-fabricmanager,--version,{fm}"},
            units={"nvidia-fabricmanager.service": _unit(
                "NVIDIA fabric manager service", "/usr/bin/nv-fabricmanager",
                "hwsim-boot-gpu.service")}),
        Pkg("cuda-toolkit-13-0", CUDA, "CUDA Toolkit 13.0",
            files={"/usr/local/cuda-13.0/version.json": cuda_json,
                   "/usr/local/cuda-13.0/bin/nvcc": nvcc},
            postinst="ln -sfn /usr/local/cuda-13.0 /usr/local/cuda\n"),
        Pkg("libnccl2", NCCL, "NVIDIA Collective Communication Library (NCCL) Runtime",
            files={"/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9": ""}),
        Pkg("libnccl-dev", NCCL, "NVIDIA Collective Communication Library (NCCL) Development",
            depends=[f"libnccl2 (= {NCCL})"], files={"/usr/include/nccl.h": nccl_h}),
        Pkg("datacenter-gpu-manager-4-core", DCGM, "NVIDIA Data Center GPU Manager (core)",
            with_lib=True,
            tools={"/usr/bin/dcgmi": "cli.dcgmi",
                   "/usr/bin/nv-hostengine": "services.daemon:nvidia-dcgm"},
            units={"nvidia-dcgm.service": _unit("NVIDIA DCGM service",
                                                "/usr/bin/nv-hostengine",
                                                "hwsim-boot-gpu.service")}),
        Pkg("datacenter-gpu-manager-4-cuda13", DCGM, "NVIDIA DCGM CUDA 13 components",
            depends=[f"datacenter-gpu-manager-4-core (= {DCGM})"],
            files={"/usr/lib/x86_64-linux-gnu/libdcgm_cublas_proxy13.so.4": ""}),
        Pkg("infiniband-diags", DOCA, "InfiniBand diagnostic programs", with_lib=True,
            tools={"/usr/sbin/ibstat": "cli.ibstat"}),
        Pkg("ibverbs-utils", DOCA, "Examples for the libibverbs library", with_lib=True,
            tools={"/usr/bin/ibv_devinfo": "cli.ibv_devinfo"}),
        Pkg("mft", "4.33.0-169", "NVIDIA Firmware Tools (mlxconfig)", with_lib=True,
            tools={"/usr/bin/mlxconfig": "cli.mlxconfig", "/usr/bin/mlxlink": "cli.mlxlink",
                   "/usr/lib/hwsim/mft/bin/hwsim-boot": "cli.boot"},
            units={"hwsim-boot-nic.service": _unit("Simulated NIC firmware state at boot",
                                                   "/usr/lib/hwsim/mft/bin/hwsim-boot nic",
                                                   kind="oneshot", before=BOOT_BEFORE)}),
        Pkg("mlnx-tools", DOCA, "Mellanox userland tools (mlnx_qos)", with_lib=True,
            tools={"/usr/sbin/mlnx_qos": "cli.mlnx_qos"}),
        Pkg("doca-ofed", DOCA, "DOCA-OFED metapackage", with_lib=True,
            depends=[f"infiniband-diags (= {DOCA})", f"ibverbs-utils (= {DOCA})", "mft",
                     f"mlnx-tools (= {DOCA})"],
            files={"/usr/lib/hwsim/modules.d/doca-ofed.list":
                   "mlx5_core mlx5_ib ib_core ib_uverbs ib_umad rdma_cm\n"},
            tools={"/usr/lib/hwsim/doca-ofed/bin/modprobe": "cli.modprobe"},
            postinst=SHIM_POSTINST.format(pkg="doca-ofed")),
        Pkg("nvme-cli", "2.4+really2.3-3+hwsim1", "NVMe management tool", with_lib=True,
            tools={"/usr/sbin/nvme": "cli.nvme"}),
        # Debian 12's perftest is in the lab mirror too (REQUIRED_DEBIAN_PACKAGES.txt); this
        # version sorts above it, so apt installs the stand-in (real ib_write_bw needs a HCA)
        Pkg("perftest", "4.5+0.17-1+hwsim1", "Infiniband verbs performance tests (ib_write_bw)",
            with_lib=True, tools={"/usr/bin/ib_write_bw": "cli.ib_write_bw"}),
        # nccl-tests prebuilt into the validation_tools role's default dir (the lab's nvcc
        # cannot compile it); the role installs it by validation_tools_nccl_tests_package
        Pkg("nccl-tests", NCCL_TESTS, "NCCL tests (<op>_perf), prebuilt", with_lib=True,
            depends=[f"libnccl2 (= {NCCL})"],
            tools={f"{NCCL_TESTS_DIR}/build/{op}_perf": f"cli.nccl_tests:{op}"
                   for op in ("all_reduce", "all_gather", "reduce_scatter", "alltoall",
                              "broadcast", "sendrecv")}),
        Pkg("pciutils", "1:3.9.0-4+hwsim1", "PCI utilities (lspci, setpci)", with_lib=True,
            tools={"/usr/bin/lspci": "cli.lspci", "/usr/bin/setpci": "cli.setpci"}),
    ]


def _copy_lib(dest: Path) -> None:
    """The stdlib-only parts of hwsim as package `hwsim` under dest."""
    pkg = dest / "hwsim"
    (pkg / "cli").mkdir(parents=True)
    (pkg / "services").mkdir()
    (pkg / "__init__.py").write_text('"""hwsim node-side tools (SIMULATED)."""\n')
    for sub in ("cli", "services"):
        for f in (HERE / sub).glob("*.py"):
            shutil.copy2(f, pkg / sub / f.name)
    shutil.copytree(HERE / "captures", pkg / "captures")


def _stage(p: Pkg, root: Path) -> None:
    arch = "all"
    version_field = p.version
    control = [f"Package: {p.name}", f"Version: {version_field}", f"Architecture: {arch}",
               f"Maintainer: {MAINTAINER}", "Section: misc", "Priority: optional"]
    if p.depends:
        control.append("Depends: " + ", ".join(p.depends))
    control.append(f"Description: {p.description} - hwsim stand-in (SIMULATED)\n"
                   " Stand-in built by rackready's lab for simulated nodes; it answers from\n"
                   " /var/lib/hwsim/state.json instead of real hardware.")
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text("\n".join(control) + "\n")
    if p.with_lib:
        _copy_lib(root / "usr/lib/hwsim" / p.name)
    for path, module in p.tools.items():
        mod, _, args = module.partition(":")
        arglist = args.split(",") if args else []
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_wrapper(p.name, mod, arglist))
        target.chmod(0o755)
    for path, content in p.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(0o755 if content.startswith("#!") else 0o644)
    for name, content in p.units.items():
        unit = root / "lib/systemd/system" / name
        unit.parent.mkdir(parents=True, exist_ok=True)
        unit.write_text(content)
    post = p.postinst
    if p.units:
        names = " ".join(p.units)
        post += (f"if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; "
                 f"systemctl enable {names} || true; fi\n")
    for name, body in (("postinst", post), ("prerm", p.prerm)):
        if body:
            script = root / "DEBIAN" / name
            script.write_text("#!/bin/sh\nset -e\n" + body)
            script.chmod(0o755)


def build_packages(out_dir: Path, fabricmanager_version: str | None = None) -> list[Path]:
    """Build every stand-in .deb into out_dir; returns the files.

    fabricmanager_version builds nvidia-fabricmanager/libnvidia-nscq at another
    version (e.g. "580.126.09-1") to prove the driver/fabric manager check.
    """
    if shutil.which("dpkg-deb") is None:
        raise PackageError("dpkg-deb not found; install dpkg to build the hwsim packages")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = package_specs(fabricmanager_version or DRIVER)
    if fabricmanager_version:
        specs = [p for p in specs if p.name in ("nvidia-fabricmanager", "libnvidia-nscq")]
    built = []
    with tempfile.TemporaryDirectory(prefix="hwsim-deb-") as tmp:
        for p in specs:
            root = Path(tmp) / p.name
            _stage(p, root)
            deb = out_dir / f"{p.name}_{p.version.split(':')[-1]}_all.deb"
            res = subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root),
                                  str(deb)], capture_output=True, text=True)
            if res.returncode != 0:
                raise PackageError(f"dpkg-deb failed for {p.name}: {res.stderr.strip()}")
            built.append(deb)
    return built
