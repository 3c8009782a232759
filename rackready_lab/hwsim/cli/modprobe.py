"""modprobe shim (/usr/local/sbin/modprobe, shipped by the driver and DOCA packages).

The lab kernel cannot load GPU or ConnectX modules: for those names the shim
records the module in the state (after its dependencies); everything else
goes to the real /usr/sbin/modprobe. Under Secure Boot (state secure_boot.enabled)
an nvidia module loads only when its file is signed by a trusted key
(secureboot.py); otherwise it fails as the kernel does: "Key was rejected by service".
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .common import ToolError, locked_state, run
from .secureboot import refusal

SIMULATED = ("nvidia", "mlx5_", "ib_", "rdma_")
# Provided by the Debian kernel itself, whatever is installed.
INBOX = {"mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs", "ib_umad", "rdma_cm", "rdma_ucm"}
DEPENDS = {"nvidia_modeset": ["nvidia"], "nvidia_uvm": ["nvidia"], "nvidia_drm":
           ["nvidia_modeset"], "nvidia_peermem": ["nvidia", "ib_core"],
           "mlx5_ib": ["mlx5_core", "ib_core", "ib_uverbs"], "ib_uverbs": ["ib_core"],
           "ib_umad": ["ib_core"], "rdma_cm": ["ib_core"],
           "rdma_ucm": ["rdma_cm", "ib_uverbs"]}
REAL = "/usr/sbin/modprobe"


def available() -> set[str]:
    d = Path(os.environ.get("HWSIM_MODULES_DIR", "/usr/lib/hwsim/modules.d"))
    names = set(INBOX)
    for f in d.glob("*.list") if d.is_dir() else []:
        names.update(f.read_text().split())
    return names


def _closure(name: str) -> list[str]:
    out: list[str] = []
    for dep in DEPENDS.get(name, []):
        out += [m for m in _closure(dep) if m not in out]
    return out + [name]


def main(argv: list[str]) -> int:
    flags = [a for a in argv if a.startswith("-")]
    names = [a for a in argv if not a.startswith("-") and "=" not in a]
    mods = [n.replace("-", "_") for n in names]
    if not mods or not all(m.startswith(SIMULATED) for m in mods):
        os.execv(REAL, [REAL, *argv])
    remove = "-r" in flags or "--remove" in flags
    if not remove:
        mods = mods[:1]  # modprobe NAME [params]: one module, the rest are parameters
    have = available()
    with locked_state() as state:
        loaded = state.setdefault("modules", [])
        for m in mods:
            if remove:
                users = [u for u, deps in DEPENDS.items() if m in deps and u in loaded]
                if users:
                    raise ToolError(f"modprobe: FATAL: Module {m} is in use.", 1)
                if m in loaded:
                    loaded.remove(m)
                continue
            for need in _closure(m):
                if need not in have:
                    raise ToolError(f"modprobe: FATAL: Module {need} not found in directory "
                                    f"/lib/modules/{state['kernel']['release']}", 1)
                if need not in loaded:
                    why = refusal(state, need) if need.startswith("nvidia") else None
                    if why:
                        raise ToolError(why, 1)
                    loaded.append(need)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
