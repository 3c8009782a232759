"""GPUDirect RDMA bandwidth per compute ConnectX rail (perftest ib_write_bw --use_cuda).

How it runs on one node: for each rail, an ib_write_bw server on that device (GPU buffer
on the rail's GPU) and a client on the same host connecting to it over localhost. The
data path is GPU memory -> PCIe -> ConnectX -> ConnectX loopback -> PCIe -> GPU memory,
so it proves GPUDirect (nvidia_peermem), the NIC's PCIe link and the GPU-NIC placement;
the cable and switch are proved by network.ports (rate, state) and the fabric's own test.
The rail's GPU: the site's `rdma_gpudirect: {gpu: {mlx5_0: 0, ...}}`, else the GPU the
node's launch map puts beside the NIC (pcie.launch_map: behind the same PCIe switch, else
on its NUMA node; on a DGX-like layout NIC3 is GPU 1's), else rail i of n -> GPU
i*gpus//n.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from validation import launch_map
from validation.checks.common import m, smi
from validation.checks.network import ibstat
from validation.checks.registry import CheckSkipped, CommandFailed, Context, check
from validation.model import Measurement
from validation.probes.perftest import parse_bw

BASE_PORT = 18515  # perftest's default port; one per rail so no two runs collide
SIZE = 8 << 20  # 8 MiB messages: bandwidth-bound, past the latency knee
DURATION_S = {"standard": 5, "burnin": 30}
LISTEN_WAIT_S = 0.5  # the most a client waits for its server to listen
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def listening(port: int, tables: tuple[str, ...] = TCP_TABLES) -> bool:
    """Whether a TCP socket listens on port (the kernel's tables: nothing connects to it,
    so perftest's server, which serves one client, is left alone)."""
    for table in tables:
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN
            if len(fields) > 3 and fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
                return True
    return False


def await_server(server: subprocess.Popen[str], port: int, limit_s: float = LISTEN_WAIT_S,
                 poll_s: float = 0.02) -> None:
    """Wait until the server listens on port or has exited, at most limit_s."""
    deadline = time.monotonic() + limit_s
    while server.poll() is None and not listening(port) and time.monotonic() < deadline:
        time.sleep(poll_s)


def gid_index(site: dict) -> int:
    """RoCE's GID index, as the rdma_network role's variable says (one source)."""
    if "rdma_network_roce_gid_index" not in site:
        raise RuntimeError("site file lacks rdma_network_roce_gid_index (the controller "
                           "derives it from the inventory)")
    return int(site["rdma_network_roce_gid_index"])


def _cmd(ca: str, gpu: int, port: int, duration: int, gid: int | None) -> list[str]:
    """gid: the RoCE GID index; None on InfiniBand (no GID needed)."""
    cmd = ["ib_write_bw", "-d", ca, "-i", "1", f"--use_cuda={gpu}", "--report_gbits", "-F",
           "-s", str(SIZE), "-D", str(duration), "-p", str(port)]
    return cmd + (["-x", str(gid)] if gid is not None else [])


def rail_gpu(lmap: launch_map.LaunchMap | None, nic: str, i: int, ngpu: int, nrails: int
             ) -> int:
    """The GPU whose buffer rail `nic` moves: the one the launch map puts beside that NIC
    (behind its PCIe switch, else on its NUMA node), else rail i of n -> GPU i*gpus//n."""
    b = lmap.for_nic(nic) if lmap is not None else None
    return b.gpu if b is not None else i * ngpu // nrails


def _launch_map(ctx: Context) -> launch_map.LaunchMap | None:
    from validation.checks.pcie import launch_map_of

    try:
        return launch_map_of(ctx)
    except Exception:  # noqa: BLE001  no map (no topo -m): the bus-order fallback
        return None


@check("rdma.gpudirect_bw", emits=("rdma.gpudirect_bw_gbps",),
       needs=("gpu", "rdma"), levels=("standard", "burnin"),
       timeout_s=1800, title="GPUDirect RDMA write bandwidth per compute ConnectX rail "
                             "(perftest ib_write_bw --use_cuda, loopback on the node)")
def gpudirect_bw(ctx: Context) -> Iterator[Measurement]:
    cas = ibstat(ctx)
    ngpu = len(smi(ctx).gpus)
    chosen = dict((ctx.site.get("rdma_gpudirect") or {}).get("gpu") or {})
    duration = int((ctx.site.get("rdma_gpudirect") or {}).get("duration_s",
                                                               DURATION_S.get(ctx.level, 5)))
    lmap = _launch_map(ctx)
    for i, ca in enumerate(cas):
        gpu = int(chosen.get(ca.name, rail_gpu(lmap, ca.name, i, ngpu, len(cas))))
        roce = any(p.link_layer == "Ethernet" for p in ca.ports)
        cmd = _cmd(ca.name, gpu, BASE_PORT + i, duration, gid_index(ctx.site) if roce else None)
        name = f"ib_write_bw-{ca.name}.txt"
        try:
            server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
        except FileNotFoundError:
            raise CheckSkipped("ib_write_bw not found on this node (perftest)") from None
        try:
            await_server(server, BASE_PORT + i)  # it listens before the client connects
            try:
                text = ctx.run(cmd + ["localhost"], timeout_s=duration + 60, artifact=name)
            except CommandFailed as e:
                yield m("rdma.gpudirect_bw_gbps", 0.0,
                        {"nic": ca.name, "gpu": str(gpu), "error": str(e)[:200]})
                continue
        finally:
            try:
                server.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.communicate()
        best = max(parse_bw(text), key=lambda r: r.avg_gbps)
        yield m("rdma.gpudirect_bw_gbps", best.avg_gbps,
                {"nic": ca.name, "gpu": str(gpu), "size_bytes": str(best.size_bytes)},
                f"artifacts/{name}")
