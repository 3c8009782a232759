"""The launch map from real `nvidia-smi topo -m` captures (tests/fixtures/topology/README.md
names each machine and where it was published): which NIC and CPUs each local rank gets,
the wiring contradiction a profile fails, and the launch snippets."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from validation import launch_map
from validation.checks.pcie import launch_measurements
from validation.judge import judge
from validation.launch_map import cpulist
from validation.model import CheckResult
from validation.probes.nvidia_smi import Topology, parse_topo
from validation.profile import load_profile, nic_placement
from validation.workloads import binding

TOPO = Path(__file__).resolve().parents[2] / "fixtures" / "topology"
# the DGX/HGX H200 capture's compute NICs: its other four ports are two dual-port NICs
# (PIX to each other, NODE to every GPU), storage and in-band management
COMPUTE = {"mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"}


def topo(name: str) -> Topology:
    return parse_topo((TOPO / name).read_text())


def numa_cpus(t: Topology) -> dict[int, list[int]]:
    """Each NUMA node's CPUs as the capture's CPU Affinity column gives them."""
    return {int(t.numa[g] or 0): launch_map.parse_cpulist(c or "")
            for g, c in t.cpu_affinity.items()}


def hgx_h200(t: Topology | None = None) -> launch_map.LaunchMap:
    t = t or topo("hgx-h200-12nic.txt")
    ids = {i: (f"0000:{0x19 + i:02x}:00.0", f"16530000000{i}") for i in range(8)}
    return launch_map.build(t, numa_cpus(t), compute_nics=COMPUTE, threads_per_core=2,
                            gpu_ids=ids)


def test_hgx_rank_r_gets_the_nic_behind_its_switch_not_nic_r() -> None:
    lm = hgx_h200()
    assert [r.nic for r in lm.ranks] == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5",
                                         "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    assert {r.path for r in lm.ranks} == {"PXB"}
    assert [r.numa for r in lm.ranks] == [0, 0, 0, 0, 1, 1, 1, 1]
    # the four ranks of a socket split its 112 CPUs, each core with its hyper-thread
    assert launch_map.cpulist(lm.ranks[0].cpus) == "0-13,112-125"
    assert launch_map.cpulist(lm.ranks[7].cpus) == "98-111,210-223"
    every = [c for r in lm.ranks for c in r.cpus]
    assert len(every) == len(set(every)) == 224
    assert lm.for_nic("mlx5_3").gpu == 1 and lm.for_nic("mlx5_1") is None


def test_without_the_compute_list_a_storage_port_is_never_closer() -> None:
    t = topo("hgx-h200-12nic.txt")
    lm = launch_map.build(t, numa_cpus(t))
    assert lm.ranks[1].nic == "mlx5_3"  # PXB beats the dual-port NIC's NODE


def test_capture_pasted_with_spaces_parses_as_the_tabbed_one() -> None:
    t = topo("hgx-h100-8nic-spaces.txt")
    assert t.nics["NIC7"] == "mlx5_7" and t.cpu_affinity["GPU4"] == "48-95,144-191"
    lm = launch_map.build(t, numa_cpus(t), threads_per_core=2)
    assert [(r.nic, r.path) for r in lm.ranks] == [(f"mlx5_{i}", "PIX") for i in range(8)]
    assert launch_map.cpulist(lm.ranks[4].cpus) == "48-59,144-155"


def test_pcie_pairs_fall_back_to_the_numa_local_nic() -> None:
    t = topo("pcie-nvlink-pairs-2socket.txt")  # NIC columns headed mlx5_N, no legend
    lm = launch_map.build(t, numa_cpus(t))
    assert [(r.nic, r.path, r.numa) for r in lm.ranks] == [
        ("mlx5_0", "NODE", 0), ("mlx5_1", "NODE", 0), ("mlx5_2", "NODE", 8), ("mlx5_3", "NODE", 8)]
    assert lm.ranks[2].switch_nics == () and "mlx5_2 is NODE" in lm.ranks[2].reason
    assert launch_map.cpulist(lm.ranks[3].cpus) == "96-127"


def test_one_nic_per_socket_is_shared_and_a_far_gpu_gets_none() -> None:
    # derived from the PCIe capture: only mlx5_0 is compute, so the socket-1 GPUs reach
    # it across the socket interconnect only (SYS) and get no NIC, with the reason
    t = topo("pcie-nvlink-pairs-2socket.txt")
    lm = launch_map.build(t, numa_cpus(t), compute_nics={"mlx5_0"})
    assert [r.nic for r in lm.ranks] == ["mlx5_0", "mlx5_0", None, None]
    assert "no compute NIC on NUMA node 8" in lm.ranks[2].reason


def wrong_switch() -> Topology:
    """The H200 capture with GPU 1's NIC (mlx5_3, NIC3) moved behind GPU 5's PCIe switch:
    GPU1-NIC3 becomes SYS (other socket), GPU5-NIC3 PXB, every other cell as captured."""
    t = topo("hgx-h200-12nic.txt")
    matrix = dict(t.matrix)
    for g in t.gpus:
        matrix[(g, "NIC3")] = "SYS" if int(g[3:]) < 4 else "NODE"
    matrix[("GPU5", "NIC3")] = "PXB"
    return dataclasses.replace(t, matrix=matrix)


def test_profile_fails_a_nic_on_the_wrong_switch_naming_gpu_and_nic() -> None:
    profile = load_profile("xe9680-h200")
    assert nic_placement(profile.inventory) == "gpu-switch"  # 8 NICs for 8 GPUs
    good = judge([CheckResult("pcie.launch_map", "ok", 0.1,
                              tuple(launch_measurements(hgx_h200())))], profile)
    assert [v for v in good if v.metric.startswith("launch.") and v.outcome != "pass"] == []
    bad = judge([CheckResult("pcie.launch_map", "ok", 0.1,
                             tuple(launch_measurements(hgx_h200(wrong_switch()))))], profile)
    fails = {v.message for v in bad if v.metric.startswith("launch.") and v.outcome == "fail"}
    assert any("launch.nic_path = NODE on GPU 1 (serial 165300000001, PCI 0000:1a:00.0), "
               "NIC mlx5_0" in f for f in fails), fails
    assert any("launch.switch_nics = 0 on GPU 1" in f for f in fails)
    assert any("launch.switch_nics = 2 on GPU 5" in f and "NIC mlx5_3+mlx5_9" in f
               for f in fails)


def test_pcie_profile_accepts_numa_local_nics() -> None:
    profile = load_profile("dl380a-gen11-h100nvl")
    assert nic_placement(profile.inventory) == "numa"  # 2 NICs for 4 GPUs
    t = topo("pcie-nvlink-pairs-2socket.txt")
    verdicts = judge([CheckResult("pcie.launch_map", "ok", 0.1, tuple(launch_measurements(
        launch_map.build(t, numa_cpus(t)))))], profile)
    launch = [v for v in verdicts if v.metric.startswith("launch.")]
    assert launch and {v.outcome for v in launch} == {"pass"}
    far = launch_map.build(t, numa_cpus(t), compute_nics={"mlx5_0"})
    verdicts = judge([CheckResult("pcie.launch_map", "ok", 0.1,
                                  tuple(launch_measurements(far)))], profile)
    assert any(v.outcome == "fail" and "GPU 2" in v.message and "NIC none" in v.message
               for v in verdicts if v.metric == "launch.nic_path")


def test_snippets_bind_each_rank() -> None:
    lm = hgx_h200()
    wrapper = launch_map.torchrun_wrapper(lm)
    assert "NICS=(mlx5_0 mlx5_3 mlx5_4 mlx5_5 mlx5_6 mlx5_9 mlx5_10 mlx5_11)" in wrapper
    assert "CPUS=(0-13,112-125 14-27,126-139" in wrapper
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in wrapper
    # Slurm asks for the node's GPUs, leaves them all visible and runs the same bind.sh
    slurm = launch_map.slurm_line(lm)
    assert "--ntasks-per-node=8 --gpus-per-node=8 --cpu-bind=none" in slurm
    assert "--gpu-bind" not in slurm
    assert "LOCAL_RANK=$SLURM_LOCALID" in slurm and "exec ./bind.sh python train.py" in slurm
    assert launch_map.env_for(lm, 1) == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
        "NCCL_IB_HCA": "=mlx5_3:1"}


# What a rank started through bind.sh sees: its environment, the physical GPU a trainer's
# `cuda:LOCAL_RANK` opens (CUDA numbers the visible list from 0) and its CPUs.
PROBE = """import json, os
v = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
print(json.dumps({"gpu": int(v[int(os.environ["LOCAL_RANK"])]),
                  "order": os.environ.get("CUDA_DEVICE_ORDER"),
                  "hca": os.environ.get("NCCL_IB_HCA"),
                  "cpus": sorted(os.sched_getaffinity(0))}))
"""
BIND_KEYS = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "NCCL_IB_HCA")


def _bind(tmp_path: Path, lm: launch_map.LaunchMap, rank: int | str
          ) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "bind.sh"
    script.write_text(launch_map.torchrun_wrapper(lm))
    env = {k: v for k, v in os.environ.items() if k not in BIND_KEYS}
    return subprocess.run(["bash", str(script), sys.executable, "-c", PROBE],
                          env={**env, "LOCAL_RANK": str(rank)}, capture_output=True,
                          text=True, timeout=30, check=False)


def test_bind_sh_run_gives_each_rank_its_gpu_as_cuda_local_rank_and_its_nic(tmp_path: Path
                                                                            ) -> None:
    lm = hgx_h200()
    for b in lm.ranks:
        done = _bind(tmp_path, lm, b.rank)
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert (got["gpu"], got["order"], got["hca"]) == (b.gpu, "PCI_BUS_ID", f"={b.nic}:1")
        mine = os.sched_getaffinity(0)
        if set(b.cpus) <= mine:  # a machine as large as the capture's
            assert got["cpus"] == list(b.cpus)
            continue
        # the capture's CPUs (0-223) are not this machine's: the rank runs on the CPUs it
        # has, and says which share it could not take
        assert got["cpus"] == sorted(mine)
        assert f"local rank {b.rank} runs without its CPU share {cpulist(b.cpus)}" in done.stderr


def test_bind_sh_pins_each_rank_to_its_cpu_share(tmp_path: Path) -> None:
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        pytest.skip("needs two CPUs to give two ranks a share each")
    shares = launch_map.split_cpus(mine, 2)
    lm = launch_map.LaunchMap(tuple(
        launch_map.RankBinding(rank=r, gpu=r, nic=f"mlx5_{r}", path="PIX", numa=0,
                               cpus=tuple(shares[r])) for r in range(2)))
    for r in range(2):
        done = _bind(tmp_path, lm, r)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert json.loads(done.stdout)["cpus"] == shares[r]


@pytest.mark.parametrize("rank", ["8", "x"])
def test_bind_sh_refuses_a_rank_the_map_does_not_have(tmp_path: Path, rank: str) -> None:
    done = _bind(tmp_path, hgx_h200(), rank)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"bind.sh: LOCAL_RANK {rank}: the map has local ranks 0-7\n"


def test_the_workloads_bind_each_rank_as_bind_sh_does(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """One fact: the suite's workloads (binding.apply, before CUDA starts) run each rank
    with the environment bind.sh gives it, so the map the report hands over is the one the
    node's workloads ran."""
    lm = hgx_h200()
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: None)  # not this process's
    for b in lm.ranks:
        for k in BIND_KEYS:
            monkeypatch.delenv(k, raising=False)
        assert binding.apply(b.rank, lm) is not None
        bound = {k: os.environ[k] for k in BIND_KEYS if k in os.environ}
        script = tmp_path / "bind.sh"
        script.write_text(launch_map.torchrun_wrapper(lm))
        env = {k: v for k, v in os.environ.items() if k not in BIND_KEYS}
        shell = subprocess.run(
            ["bash", str(script), sys.executable, "-c",
             f"import json, os; print(json.dumps({{k: os.environ[k] for k in {BIND_KEYS!r} "
             "if k in os.environ}))"],
            env={**env, "LOCAL_RANK": str(b.rank)}, capture_output=True, text=True,
            timeout=30, check=True)
        assert json.loads(shell.stdout) == bound == launch_map.env_for(lm, b.rank)


@pytest.mark.parametrize("bad", [{"nic": "mlx5_0; rm -rf /"}, {"path": "FAST"}, {"gpu": "-1"}])
def test_a_malformed_map_from_the_node_is_refused(bad: dict) -> None:
    good = hgx_h200().ranks[0].to_dict()
    launch_map.RankBinding.from_dict(good)
    with pytest.raises(ValueError):
        launch_map.RankBinding.from_dict({**good, **bad})


def test_split_keeps_hyperthreads_together_and_is_fair() -> None:
    shares = launch_map.split_cpus([*range(0, 6), *range(12, 18)], 4, threads_per_core=2)
    assert shares == [[0, 1, 12, 13], [2, 3, 14, 15], [4, 16], [5, 17]]
    assert launch_map.split_cpus(list(range(7)), 2) == [[0, 1, 2, 3], [4, 5, 6]]
