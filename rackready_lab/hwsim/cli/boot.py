"""hwsim-boot: what a (re)boot does to the simulated hardware, run by systemd early.

scope gpu: the MOK manager enrolls the keys `mokutil --import` queued (the lab
confirms what a person confirms at the console); driver modules come back only
if installed (autoload lists and /etc/modules-load.d) and, under Secure Boot,
signed by a trusted key; pending ECC/MIG modes take effect; daemons start afresh.
scope nic: mlxconfig next-boot values become current (the link type changes the
port), run-time QoS is lost.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .common import ToolError, locked_state, run
from .modprobe import _closure, available
from .secureboot import refusal

DEFAULT_QOS = {"trust": "pcp", "pfc": [0] * 8, "ecn": [0] * 8,
               "dscp2prio": [d >> 3 for d in range(64)]}


def _autoload() -> list[str]:
    d = Path(os.environ.get("HWSIM_MODULES_DIR", "/usr/lib/hwsim/modules.d"))
    names = [m for f in sorted(d.glob("*.autoload")) for m in f.read_text().split()] \
        if d.is_dir() else []
    conf = Path(os.environ.get("HWSIM_MODULES_LOAD_D", "/etc/modules-load.d"))
    for f in sorted(conf.glob("*.conf")) if conf.is_dir() else []:
        names += [ln.strip() for ln in f.read_text().splitlines()
                  if ln.strip() and not ln.startswith(("#", ";"))]
    # the kernel treats '-' and '_' in module names alike (nvidia-peermem)
    return [n.replace("-", "_") for n in names]


def _grub_args() -> list[str]:
    """Kernel arguments GRUB would boot with (what update-grub and a reboot apply):
    GRUB_CMDLINE_LINUX_DEFAULT from /etc/default/grub and its grub.d drop-ins."""
    root = Path(os.environ.get("HWSIM_GRUB_DEFAULT", "/etc/default"))
    files = [root / "grub", *sorted((root / "grub.d").glob("*.cfg"))]
    args: list[str] = []
    for f in files:
        if not f.is_file():
            continue
        for line in f.read_text().splitlines():
            key, _, value = line.strip().partition("=")
            if key == "GRUB_CMDLINE_LINUX_DEFAULT":
                for tok in value.strip().strip('"').split():
                    if not tok.startswith("$") and tok not in args and tok != "quiet":
                        args.append(tok)
    return args


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("gpu", "nic"):
        raise ToolError("usage: hwsim-boot gpu|nic", 2)
    with locked_state() as state:
        if argv[0] == "gpu":
            sb = state.get("secure_boot")
            if sb:
                sb["enrolled_keys"] = sb.get("enrolled_keys", []) + sb.get("pending_keys", [])
                sb["pending_keys"] = []
            have = available()
            loaded = [m for m in state["modules"] if not m.startswith("nvidia")]
            for m in _autoload():
                if m.startswith("nvidia") and m in have:
                    chain = _closure(m)
                    # systemd-modules-load skips what the kernel refuses (unsigned under SB)
                    if not any(refusal(state, x) for x in chain if x not in loaded):
                        loaded += [x for x in chain if x not in loaded]
            state["modules"] = loaded
            kernel = state["kernel"]
            base = kernel.setdefault("base_cmdline", kernel["cmdline"])
            kernel["cmdline"] = " ".join([base, *_grub_args()]).strip()
            for svc in state["services"].values():
                svc["running"] = False
            for g in state["gpus"]:
                g["persistence_mode"] = "Disabled"
                for mode in ("ecc_mode", "mig_mode"):
                    if mode + "_pending" in g:
                        g[mode] = g[mode + "_pending"]
                if state["nvswitches"]:
                    g["fabric"] = {"state": "In Progress", "status": "N/A"}
        else:
            for n in state["nics"]:
                cfg = state["nic_config"][n["name"]]
                cfg["mlxconfig"]["current"].update(cfg["mlxconfig"].pop("pending", {}))
                cfg["mlxconfig"]["pending"] = {}
                ib = cfg["mlxconfig"]["current"]["LINK_TYPE_P1"].startswith("IB")
                bus = int(n["bdf"][5:7], 16)
                n.update(link_layer="InfiniBand" if ib else "Ethernet",
                         netdev=f"ibp{bus}s0" if ib else f"ens{bus}np0")
                cfg["qos"] = dict(DEFAULT_QOS, dscp2prio=list(DEFAULT_QOS["dscp2prio"]),
                                  mtu=4096 if ib else 1500)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
