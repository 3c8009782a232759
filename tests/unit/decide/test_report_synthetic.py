"""Synthetic run directories for the report tests, seeded from the real H200 capture.

GPU identity (name, serial, UUID, VBIOS, driver) and NCCL bus bandwidths come
from tests/fixtures/hgx-h200-2gpu. The capture has 2 GPUs; an 8-GPU node is
made by repeating those rows with the index, bus id and serial advanced per GPU
(captured serial + 1000*index: made up but well formed). Faults are edits of a
healthy result: the named GPU's GEMM throughput drops below the threshold and
the judge's verdict for it is set to fail, as the judge would.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hgx-h200-2gpu"
GEMM_TFLOPS = 662.0  # fixtures README: sustained bf16 16384^3 on one H200
GEMM_MIN = 600.0
NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")


def capture_gpus() -> list[dict[str, str]]:
    with (FIXTURES / "nvidia-smi-query-gpu.csv").open() as f:
        rows = list(csv.reader(f, skipinitialspace=True))
    header = [h.split(" [")[0] for h in rows[0]]
    return [dict(zip(header, r, strict=True)) for r in rows[1:]]


def capture_busbw(op: str) -> list[tuple[int, float]]:
    """(size_bytes, out-of-place busbw GB/s) rows of one nccl-tests capture."""
    out = []
    for line in (FIXTURES / f"nccl-tests-{op}.txt").read_text().splitlines():
        cols = line.split()
        if cols and not line.startswith("#") and cols[0].isdigit() and len(cols) >= 8:
            out.append((int(cols[0]), float(cols[7])))
    return out


def inventory(n_gpus: int = 8, replaced: dict[int, str] | None = None) -> dict[str, Any]:
    base = capture_gpus()
    gpus = []
    for i in range(n_gpus):
        row = base[i % len(base)]
        # Captured GPUs keep their real serial; the repeats get a derived one.
        serial = row["serial"] if i < len(base) else str(int(row["serial"]) + 1000 * i)
        gpus.append({"index": i, "name": row["name"],
                     "serial": (replaced or {}).get(i, serial),
                     "uuid": f"{row['uuid'][:-2]}{i:02d}",
                     "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
                     "vbios": row["vbios_version"]})
    return {"chassis": "Dell PowerEdge XE9680", "system_serial": "SIM-XE9680-0001",
            "driver": base[0]["driver_version"], "cuda": "13.0", "nccl": "2.28.9",
            "fabric_manager": "580.159.04", "gpus": gpus}


def _m(name: str, value: Any, unit: str, **labels: Any) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit,
            "labels": {k: str(v) for k, v in labels.items()}, "artifact": None}


THRESHOLDS = [
    {"metric": "gpu.count", "op": "==", "value": 8, "unit": "", "provenance": "profile: 8x H200",
     "outlier_k": None},
    {"metric": "gemm.tflops", "op": ">=", "value": GEMM_MIN, "unit": "TFLOP/s",
     "provenance": "H200 sustained bf16 662 TFLOP/s measured 2026-11-30, minus 9%",
     "outlier_k": 3.0},
    {"metric": "nccl.busbw_4g", "op": ">=", "value": 330.0, "unit": "GB/s",
     "provenance": "nccl-tests all_reduce 4 GiB 348.7 GB/s measured 2026-11-30, minus 5%",
     "outlier_k": None},
]


def result(node: str, *, fault_gpu: int | None = None, simulated: bool = True,
           n_gpus: int = 8, inv: dict[str, Any] | None = None,
           tflops_scale: float = 1.0) -> dict[str, Any]:
    inv = inv or inventory(n_gpus)
    gemm = [GEMM_TFLOPS * tflops_scale * (1 + 0.002 * i) for i in range(n_gpus)]
    if fault_gpu is not None:
        gemm[fault_gpu] = 540.0
    gemm_ms = [_m("gemm.tflops", round(v, 1), "TFLOP/s", gpu=i) for i, v in enumerate(gemm)]
    for i, v in enumerate(gemm):
        for t in range(0, 60, 10):
            gemm_ms += [_m("gemm.interval_tflops", round(v + (t % 20) / 10, 1), "TFLOP/s",
                           gpu=i, t_s=t),
                        _m("gemm.interval_power_w", 690 + i, "W", gpu=i, t_s=t),
                        _m("gemm.interval_sm_clock_mhz", 1395 if i != fault_gpu else 1100,
                           "MHz", gpu=i, t_s=t)]
    nccl_ms = [_m("nccl.busbw", bw, "GB/s", op=op, size_bytes=size)
               for op in NCCL_OPS for size, bw in capture_busbw(op)]
    ar4g = dict(capture_busbw("all_reduce"))[4 << 30]
    nccl_ms.append(_m("nccl.busbw_4g", ar4g, "GB/s", op="all_reduce"))
    loss = [_m("fsdp.loss", round(10.5 * 0.97 ** s + 2.0, 4), "", step=s) for s in range(0, 50, 5)]
    checks = [
        {"check": "gpu_inventory", "status": "ok", "duration_s": 1.2, "message": "",
         "needs": ["gpu"], "measurements": [_m("gpu.count", n_gpus, "")]},
        {"check": "gemm_burnin", "status": "ok", "duration_s": 61.0, "message": "",
         "needs": ["gpu"], "measurements": gemm_ms},
        {"check": "nccl_collectives", "status": "ok", "duration_s": 40.0, "message": "",
         "needs": ["gpu", "nvswitch"], "measurements": nccl_ms},
        {"check": "fsdp_reference", "status": "ok", "duration_s": 90.0, "message": "",
         "needs": ["gpu"], "measurements": loss},
        {"check": "ib_ports", "status": "skipped", "duration_s": 0.0,
         "message": "no InfiniBand HCA on this node", "needs": ["ib"], "measurements": []},
    ]
    t = {x["metric"]: x for x in THRESHOLDS}
    verdicts = [{"check": "gpu_inventory", "metric": "gpu.count",
                 "outcome": "pass" if n_gpus == 8 else "fail", "value": n_gpus, "unit": "",
                 "labels": {}, "threshold": t["gpu.count"], "message": "", "remediation": "",
                 "spread": None}]
    for i, v in enumerate(gemm):
        ok = v >= GEMM_MIN
        verdicts.append({
            "check": "gemm_burnin", "metric": "gemm.tflops", "outcome": "pass" if ok else "fail",
            "value": round(v, 1), "unit": "TFLOP/s", "labels": {"gpu": str(i)},
            "threshold": t["gemm.tflops"],
            "message": "" if ok else f"GPU {i} sustained {v:.0f} TFLOP/s, below {GEMM_MIN:.0f}",
            "remediation": "" if ok else (f"Check GPU {i} cooling and power cabling; reseat, "
                                          "then RMA the GPU by serial if it repeats"),
            "spread": {"min": round(v - 1, 1), "max": round(v + 1, 1), "n": 3}})
    verdicts.append({"check": "nccl_collectives", "metric": "nccl.busbw_4g", "outcome": "pass",
                     "value": ar4g, "unit": "GB/s", "labels": {"op": "all_reduce"},
                     "threshold": t["nccl.busbw_4g"], "message": "", "remediation": "",
                     "spread": None})
    verdicts.append({"check": "ib_ports", "metric": "ib.port_state", "outcome": "not_applicable",
                     "value": None, "unit": "", "labels": {}, "threshold": None,
                     "message": "the profile asks for no InfiniBand", "remediation": "",
                     "spread": None})
    failed = any(v["outcome"] == "fail" for v in verdicts)
    return {
        "schema_version": "1.0", "run_id": "run-20261130-1200", "node": node,
        "hostname": f"{node}.lab", "profile": "xe9680-h200" + ("-lab" if simulated else ""),
        "level": "quick", "simulated": simulated, "started": "2026-11-30T12:00:00Z",
        "finished": "2026-11-30T12:04:00Z",
        "tool_versions": {"validation": "0.1.0", "nccl-tests": "2.19.6", "torch": "2.13.0"},
        "bundle_sha256": "ab" * 32, "inventory": inv, "checks": checks, "verdicts": verdicts,
        "outcome": "FAIL" if failed else "PASS", "thresholds": THRESHOLDS, "artifacts": {},
        "extra": {"golden_loss": [[s, round(10.5 * 0.97 ** s + 2.0, 4)] for s in range(0, 50, 5)]},
    }


def events_for(res: dict[str, Any], finished: bool = True) -> list[dict[str, Any]]:
    """The event stream the node would have written for this result."""
    ts = res["started"]
    evs: list[dict[str, Any]] = [{"event": "run_started", "ts": ts, "run_id": res["run_id"],
                                  "node": res["node"], "profile": res["profile"],
                                  "level": res["level"], "simulated": res["simulated"]}]
    for c in res["checks"]:
        evs.append({"event": "check_started", "ts": ts, "check": c["check"], "needs": c["needs"]})
        evs += [{"event": "measurement", "ts": ts, "check": c["check"], "measurement": m}
                for m in c["measurements"]]
        evs.append({"event": "check_finished", "ts": ts, "check": c["check"], "result": c})
    if finished:
        evs.append({"event": "run_finished", "ts": res["finished"], "outcome": res["outcome"]})
    return evs


def judgement_for(res: dict[str, Any], complete: bool = True) -> dict[str, Any]:
    """What the controller's judge records for this synthetic node (rackready.decide.node's
    shape): the report tests exercise rendering; judging has its own tests."""
    from rackready.decide.outcome import component_words

    verdicts = [{**v, "scope": "node", "component": component_words(v["labels"],
                                                                    res["inventory"])}
                for v in res["verdicts"]] if complete else []
    failing = [v for v in verdicts if v["outcome"] == "fail"]
    outcome = ("INCOMPLETE" if not complete else "FAIL" if failing else "PASS")
    reason = ("no result.json: the run did not finish" if not complete else
              f"{len(failing)} verdict(s) failed; first: {failing[0]['metric']} on "
              f"{failing[0]['component']}" if failing else "")
    return {"node": res["node"], "by": "controller", "judged": "2026-11-30T12:05:00+00:00",
            "profile": res["profile"], "profile_sha256": "cd" * 32, "level": res["level"],
            "scope": {"partial": False, "only": None, "gpus": None, "without": [],
                      "waivers_from": "inventory", "level": res["level"],
                      "missing_checks": []},
            "complete": complete, "node_claimed_outcome": res["outcome"] if complete else None,
            "verdicts": verdicts, "fleet_verdicts": [], "thresholds": res["thresholds"],
            "golden_loss": [{"step": float(s), "loss": float(v)}
                            for s, v in res.get("extra", {}).get("golden_loss", [])],
            "problems": [] if complete else ["no result.json: the run did not finish"],
            "outcome": outcome, "outcome_reason": reason}


def write_node(run_dir: Path, res: dict[str, Any], *, with_result: bool = True) -> Path:
    d = run_dir / res["node"]
    d.mkdir(parents=True, exist_ok=True)
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events_for(res)))
    if with_result:
        (d / "result.json").write_text(json.dumps(res, indent=1))
    (d / "judgement.json").write_text(json.dumps(judgement_for(res, with_result), indent=1))
    return d


def write_run(run_dir: Path, results: list[dict[str, Any]]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": "run-20261130-1200", "inventory": "lab", "started": "2026-11-30T12:00:00Z",
        "finished": "2026-11-30T12:05:00Z", "operator": {"site": "Lab A", "ticket": "RR-7"}}))
    for r in results:
        write_node(run_dir, r)
    return run_dir


def healthy_and_faulty(run_dir: Path) -> Path:
    """The standard two-node lab run: gpu01 healthy, gpu02 with GPU 3 slow."""
    return write_run(run_dir, [result("gpu01"), result("gpu02", fault_gpu=3)])


def test_capture_seed_reads_the_real_gpus() -> None:
    gpus = capture_gpus()
    assert [g["serial"] for g in gpus] == ["1653724027147", "1653124039737"]
    # README: all_reduce 4 GiB busbw 348.7 GB/s on this machine
    assert dict(capture_busbw("all_reduce"))[4 << 30] == 348.68


def test_inventory_extends_to_eight_distinct_gpus() -> None:
    inv = inventory(8)
    assert len({g["serial"] for g in inv["gpus"]}) == 8
    assert inv["gpus"][1]["serial"] == "1653124039737"
    assert inv["gpus"][0]["vbios"] == "96.00.A5.00.1A"
