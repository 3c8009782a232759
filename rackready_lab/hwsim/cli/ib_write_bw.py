"""ib_write_bw stand-in (perftest): one GPUDirect (--use_cuda) or host-memory RDMA write run.

Prints perftest's report (banner, QP addresses, the `#bytes #iterations BW peak BW average
MsgRate` table) with a bandwidth from the state: ~97 % of the slowest of the port rate, the
NIC's PCIe link and (with --use_cuda) the GPU's PCIe link, so a down port fails, a slow or
downtrained one reports less. Server (no host) and client (host) both print the report, as
perftest does; neither waits, the run is simulated.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

from .common import ToolError, load_state, module_loaded, present, run, visible_gpus

USAGE = ("Usage: ib_write_bw [-d ib_dev] [-i port] [--use_cuda=<gpu>] [--report_gbits] [-F] "
         "[-s size] [-D seconds] [-n iters] [-p port] [-x gid] [host]")
PCIE_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
RULE = "-" * 87
VALUED = ("-d", "-i", "-s", "-D", "-n", "-p", "-x", "-q", "-m")


def _pcie_gbps(p: dict[str, Any]) -> float:
    # 128b/130b payload of the link (gen 3 and later)
    return PCIE_GTS.get(int(p["gen_cur"]), 32.0) * int(p["width_cur"]) * 128 / 130


def _args(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    rest: list[str] = []
    it = iter(argv)
    for a in it:
        if a in VALUED:
            try:
                opts[a] = next(it)
            except StopIteration:
                raise ToolError(USAGE, 1) from None
        elif a.startswith("--use_cuda="):
            opts["--use_cuda"] = a.split("=", 1)[1]
        elif a in ("--report_gbits", "-F", "--report-both", "-a"):
            opts[a] = ""
        elif a.startswith("-"):
            raise ToolError(f"ib_write_bw: invalid option -- '{a.lstrip('-')}'\n{USAGE}", 1)
        else:
            rest.append(a)
    if len(rest) > 1:
        raise ToolError(USAGE, 1)
    return opts, rest


def bandwidth_gbps(state: dict[str, Any], nic: dict[str, Any], gpu: dict[str, Any] | None) -> float:
    limit = float(nic["rate"])
    if nic.get("pcie"):
        limit = min(limit, _pcie_gbps(nic["pcie"]))
    if gpu is not None:
        limit = min(limit, _pcie_gbps(gpu["pcie"]))
    # a stable per-port spread of up to 1.5 % (real ports differ a little)
    jitter = hashlib.sha256(f"{state['node']}:{nic['name']}".encode()).digest()[0] / 255 * 0.015
    # a slow rail (fault slow-rail): the port trains at full rate yet carries less
    return round(limit * (0.975 - jitter) * float(nic.get("bw_factor", 1.0)), 2)


def main(argv: list[str]) -> int:
    opts, rest = _args(argv)
    state = load_state()
    nics = present(state["nics"]) if module_loaded(state, "mlx5_ib") else []
    if not nics:
        raise ToolError("No IB devices found", 1)
    name = opts.get("-d", nics[0]["name"])
    nic = next((n for n in nics if n["name"] == name), None)
    if nic is None:
        raise ToolError(f" IB device {name} not found\n"
                        " Unable to find the Infiniband/RoCE device", 1)
    gpu = None
    if "--use_cuda" in opts:
        gpus = visible_gpus(state)
        idx = opts["--use_cuda"]
        if not idx.isdigit() or int(idx) >= len(gpus):
            raise ToolError(f"No CUDA device {idx}: {len(gpus)} CUDA devices found", 1)
        gpu = gpus[int(idx)]
        if not module_loaded(state, "nvidia_peermem"):
            # without nvidia_peermem the HCA cannot register GPU memory
            raise ToolError("Couldn't allocate MR\n Failed to create MR", 1)
    if nic["state"] != "Active":
        raise ToolError(f" Port number {opts.get('-i', '1')} state is {nic['state']}\n"
                        " Couldn't set up the IB device", 1)
    size = int(opts.get("-s", "65536"))
    gbps = bandwidth_gbps(state, nic, gpu)
    unit = "Gb/sec" if "--report_gbits" in opts else "MB/sec"
    shown = gbps if unit == "Gb/sec" else gbps * 1e9 / 8 / (1 << 20)
    peak = shown * 1.004
    duration = float(opts.get("-D", "0") or 0)
    iters = int(gbps * 1e9 / 8 / size * duration) if duration else int(opts.get("-n", "5000"))
    mpps = gbps * 1e9 / 8 / size / 1e6
    ib = nic["link_layer"] == "InfiniBand"
    lines = []
    if gpu is not None:
        lines += ["initializing CUDA", "Listing all CUDA devices in system:",
                  f"CUDA device {opts['--use_cuda']}: PCIe address is "
                  f"{gpu['bdf'][5:].upper()}", "", f"Picking device No. {opts['--use_cuda']}",
                  f"[pid = 4242, dev = {opts['--use_cuda']}] device name = [{gpu['name']}]",
                  "creating CUDA Ctx", "making it the current CUDA Ctx",
                  f"cuMemAlloc() of a {size * 2} bytes GPU buffer", ""]
    lines += [RULE, "                    RDMA_Write BW Test",
              f" Dual-port       : OFF\t\tDevice         : {nic['name']}",
              " Number of qps   : 1\t\tTransport type : IB",
              " Connection type : RC\t\tUsing SRQ      : OFF",
              " PCIe relax order: ON", " ibv_wr* API     : ON", " TX depth        : 128",
              " CQ Moderation   : 1", " Mtu             : 4096[B]",
              f" Link type       : {'IB' if ib else 'Ethernet'}",
              *([] if ib else [f" GID index       : {opts.get('-x', '0')}"]),
              " Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet",
              RULE,
              " local address: LID 0x01 QPN 0x0068 PSN 0x3e2d0a RKey 0x1fffbd "
              "VAddr 0x007f4a00000000",
              " remote address: LID 0x01 QPN 0x0069 PSN 0x9a01c4 RKey 0x1fffbe "
              "VAddr 0x007f4b00000000",
              RULE,
              f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]",
              f" {size:<10} {iters:<10}       {peak:.2f}             {shown:.2f}"
              f"               {mpps:.6f}",
              RULE]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
