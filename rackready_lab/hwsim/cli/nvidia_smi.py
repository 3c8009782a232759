"""nvidia-smi stand-in: answers from /var/lib/hwsim/state.json (HWSIM_STATE)."""

from __future__ import annotations

import sys
from typing import Any

from . import smi_query, smi_render, smi_topo
from .common import (
    ToolError,
    load_state,
    locked_state,
    lost_gpus,
    module_loaded,
    run,
    smi_bus_id,
    smi_timestamp,
    visible_gpus,
)

USAGE = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
HELP = """NVIDIA System Management Interface -- v{v} (hwsim stand-in, SIMULATED)

    nvidia-smi [-i ID] [-q [-x] [-d TYPE[,TYPE]]] | -L
    nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits] [-i ID]
    nvidia-smi --query-remapped-rows=FIELDS --format=csv[,noheader][,nounits]
    nvidia-smi topo -m
    nvidia-smi nvlink -s|-e|-c [-i ID]
    nvidia-smi [-i ID] -pm 0|1 | -e 0|1 | -mig 0|1
"""
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")
RC_BAD_ARGS = 2
RC_NOT_FOUND = 6
RC_NO_DRIVER = 9
RC_GPU_LOST = 15


def _opts(argv: list[str], flags: set[str], valued: set[str]) -> dict[str, Any]:
    """--key=value, --key value, -k value, and bare flags; anything else is a usage error."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, eq, val = arg.partition("=")
        if key in valued:
            if not eq:
                i += 1
                if i >= len(argv):
                    raise ToolError(USAGE, RC_BAD_ARGS)
                val = argv[i]
            out[key] = val
        elif arg in flags:
            out[arg] = True
        else:
            raise ToolError(USAGE, RC_BAD_ARGS)
        i += 1
    return out


def _select(gpus: list[dict[str, Any]], ident: str | None) -> list[tuple[int, dict[str, Any]]]:
    """-i: index, serial, UUID or PCI bus id, comma separated, as the real tool accepts."""
    numbered = list(enumerate(gpus))
    if ident is None:
        return numbered
    chosen = []
    for want in ident.split(","):
        w = want.strip()
        match = [(i, g) for i, g in numbered
                 if w in (str(i), g["serial"], g["uuid"])
                 or w.upper() in (smi_bus_id(g["bdf"]), g["bdf"].upper())]
        if not match:
            raise ToolError("No devices were found", RC_NOT_FOUND)
        chosen += match
    return chosen


def _box(text: str) -> str:
    return f"| {text:<87} |"


def _summary(state: dict[str, Any], gpus: list[tuple[int, dict[str, Any]]]) -> str:
    """The default table (no arguments), in the driver 580 layout."""
    d = state["driver"]
    edge = "+" + "-" * 89 + "+"
    bar = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    lines = [smi_timestamp(), edge,
             _box(f"NVIDIA-SMI {d['version']:<22} Driver Version: {d['version']:<14} "
                  f"CUDA Version: {d['cuda']}"),
             bar,
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A |"
             " Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage |"
             " GPU-Util  Compute M. |",
             "|" + " " * 41 + "|" + " " * 24 + "|               MIG M. |",
             bar.replace("-", "=")]
    for i, g in gpus:
        unc = sum(v for k, v in g["ecc"]["volatile"].items() if "uncorrectable" in k)
        pm = "On" if g["persistence_mode"] == "Enabled" else "Off"
        left = f" N/A  {g['temp_c']:>3}C    P0"
        power = f"{g['power_draw_w']:.0f}W / {g['power_limit_w']:.0f}W "
        mem = f"0MiB / {g['memory_mib']}MiB "
        lines += [
            f"| {i:>3}  {g['name']:<24}{pm:>10} | {smi_bus_id(g['bdf'])} {'Off':>6} |"
            f" {unc:>20} |",
            f"|{left}{power:>{41 - len(left)}}|{mem:>24}| {'0%':>7}{'Default':>13} |",
            "|" + " " * 41 + "|" + " " * 24 + "|             Disabled |", bar]
    lines += ["", edge, _box("Processes:"),
              _box(" GPU   GI   CI              PID   Type   Process name"
                   "                        GPU Memory"),
              _box("       ID   ID                                                   "
                   "            Usage"),
              "|" + "=" * 89 + "|", _box(" No running processes found"), edge]
    return "\n".join(lines) + "\n"


# -pm/-e/-mig: state key, what the real tool prints, whether it waits for a reboot.
MODE_FLAGS = {
    "-pm": "persistence", "--persistence-mode": "persistence",
    "-e": "ecc", "--ecc-config": "ecc",
    "-mig": "mig", "--multi-instance-gpu": "mig",
}


def _set_mode(argv: list[str]) -> int:
    """nvidia-smi [-i ID] -pm|-e|-mig 0|1: persistence now; ECC and MIG at the next boot."""
    o = _opts(argv, set(), {"-i", "--id", *MODE_FLAGS})
    flags = [f for f in o if f in MODE_FLAGS]
    if len(flags) != 1 or o[flags[0]].upper() not in ("0", "1", "ENABLED", "DISABLED"):
        raise ToolError(USAGE, RC_BAD_ARGS)
    kind = MODE_FLAGS[flags[0]]
    on = o[flags[0]].upper() in ("1", "ENABLED")
    value = word = "Enabled" if on else "Disabled"
    with locked_state() as locked:
        chosen = _select(visible_gpus(locked), o.get("-i") or o.get("--id"))
        for _, g in chosen:
            bus = smi_bus_id(g["bdf"])
            if kind == "persistence":
                g["persistence_mode"] = value
                print(f"{word} persistence mode for GPU {bus}.")
            elif kind == "ecc":
                g["ecc_mode_pending"] = value
                print(f"{word} ECC support for GPU {bus}.")
            else:
                g["mig_mode_pending"] = value
                if g.get("mig_mode", "Disabled") == value:
                    print(f"{word} MIG Mode for GPU {bus}")
                else:
                    # the lab's daemons hold the GPU, so the change waits for a reset/reboot
                    state_word = "enable" if on else "disable"
                    print(f"Warning: MIG mode is in pending {state_word} state for GPU {bus}:"
                          "In use by another client\n"
                          f"{bus} is currently being used by one or more other processes "
                          "(e.g. CUDA application or a monitoring application such as another "
                          "instance of nvidia-smi). Please first kill all processes using the "
                          "device and retry the command or reboot the system to make MIG mode "
                          "effective.")
    print("All done.")
    if kind == "ecc":
        print("Reboot required.")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(HELP.format(v="580"))
        return 0
    state = load_state()
    if not module_loaded(state, "nvidia"):
        raise ToolError(NO_DRIVER, RC_NO_DRIVER)
    gpus = visible_gpus(state)
    lost = lost_gpus(state)
    for g in lost:
        print(f"Unable to determine the device handle for GPU{smi_bus_id(g['bdf'])}: "
              "Unknown Error", file=sys.stderr)
    rc = RC_GPU_LOST if lost else 0

    if argv[:1] == ["topo"]:
        if argv[1:] != ["-m"]:
            raise ToolError(USAGE, RC_BAD_ARGS)
        sys.stdout.write(smi_topo.render_topo(state, gpus))
        return rc
    if argv[:1] == ["nvlink"]:
        o = _opts(argv[1:], {"-s", "--status", "-e", "--error-counters", "-c",
                             "--capabilities"}, {"-i", "--id"})
        modes = [m for m, names in (("s", ("-s", "--status")), ("e", ("-e", "--error-counters")),
                                    ("c", ("-c", "--capabilities"))) if any(n in o for n in names)]
        if len(modes) != 1:
            raise ToolError(USAGE, RC_BAD_ARGS)
        chosen = _select(gpus, o.get("-i") or o.get("--id"))
        sys.stdout.write(smi_topo.render_nvlink(chosen, modes[0]))
        return rc

    if any(a.split("=")[0] in MODE_FLAGS for a in argv):
        return _set_mode(argv) or rc
    o = _opts(argv, {"-q", "--query", "-x", "--xml-format", "-L", "--list-gpus"},
              {"-i", "--id", "-d", "--display", "--query-gpu", "--query-remapped-rows",
               "--format"})
    chosen = _select(gpus, o.get("-i") or o.get("--id"))
    only = [g for _, g in chosen]
    query = "-q" in o or "--query" in o
    xml = "-x" in o or "--xml-format" in o
    display = o.get("-d") or o.get("--display")
    if "--query-gpu" in o or "--query-remapped-rows" in o:
        if query or xml or "--format" not in o:
            raise ToolError(USAGE, RC_BAD_ARGS)
        if "--query-gpu" in o:
            out = smi_query.render_csv(state, chosen, o["--query-gpu"], o["--format"],
                                       smi_query.GPU_FIELDS)
        else:
            out = smi_query.render_csv(state, chosen, o["--query-remapped-rows"], o["--format"],
                                       smi_query.REMAP_FIELDS)
        sys.stdout.write(out)
    elif "-L" in o or "--list-gpus" in o:
        if query or xml:
            raise ToolError(USAGE, RC_BAD_ARGS)
        for i, g in chosen:
            print(f"GPU {i}: {g['name']} (UUID: {g['uuid']})")
    elif query:
        if xml:
            if display:
                raise ToolError(USAGE, RC_BAD_ARGS)
            sys.stdout.write(smi_render.render_xml(state, only))
        else:
            if display and any(d not in smi_render.DISPLAY_SECTIONS
                               for d in display.upper().split(",")):
                raise ToolError(USAGE, RC_BAD_ARGS)
            sys.stdout.write(smi_render.render_text(state, only,
                                                    display.upper() if display else None))
    elif xml or display or "--format" in o:
        raise ToolError(USAGE, RC_BAD_ARGS)
    else:
        sys.stdout.write(_summary(state, chosen))
    return rc


if __name__ == "__main__":
    sys.exit(run(main))
