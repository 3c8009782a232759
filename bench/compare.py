"""Issue 15's table from one bench sitting: rackready beside the field's tools, both columns
measured by bench/run_gpu.sh in the same run.

    python3 bench/compare.py W [--out results.md] [--json results.json]

W is run_gpu.sh's work folder:
    env.txt, command.txt, timing.tsv            machine, versions, date, command, seconds per part
    coll/[r<N>/]collectives.rank0.jsonl          rackready collectives (mode, launch, alloc labels)
    nccl-tests/[r<N>/]<op>.txt                   nccl-tests <op>_perf output, same run
                                                 (r<N>: round N; each column's median is used)
    bare/, gemm/                                 bare matmul loop and the burn-in
    fsdp8b_none/, fsdp8b_selective/              the reference job, compiled, AC none / selective
    titan_none.log, titan_selective.log          torchtitan's train log, same shape
    levels-timing.txt                            (optional) bench/validate_on_gpu.sh's timing.txt
A part that did not run is a row that says so, never a number from elsewhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from summarize import load  # noqa: E402

from validation.workloads.busbw import NcclTestsRow, parse_nccl_tests  # noqa: E402
from validation.workloads.golden import loss_windows, window_rise  # noqa: E402

OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast")
SIZES = (64 << 20, 256 << 20, 1 << 30, 4 << 30)
COLL_TARGET = 0.98
LEVEL_TARGETS = {"quick": 90, "standard": 480}  # seconds on 2 GPUs
TITAN_SKIP = 3  # torchtitan's first steps (compile, warm-up) left out of its medians

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TITAN = re.compile(
    r"step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>[-\d.]+).*?memory:\s*(?P<mem>[\d.]+)GiB"
    r".*?tps:\s*(?P<tps>[\d,]+).*?mfu:\s*(?P<mfu>[\d.]+)%")


def parse_titan_log(text: str) -> list[dict[str, float]]:
    """torchtitan (v0.2.x) metric lines: step, loss, memory (max reserved GiB), tps, mfu %."""
    out = []
    for line in _ANSI.sub("", text).splitlines():
        m = _TITAN.search(line)
        if m:
            out.append({"step": int(m["step"]), "loss": float(m["loss"]),
                        "mem_gib": float(m["mem"]), "tps": float(m["tps"].replace(",", "")),
                        "mfu": float(m["mfu"]) / 100})
    return out


def titan_summary(rows: list[dict[str, float]], skip: int = TITAN_SKIP) -> dict[str, Any] | None:
    if not rows:
        return None
    steady = [r for r in rows if r["step"] > skip] or rows
    return {"tps": statistics.median(r["tps"] for r in steady),
            "tps_range": (min(r["tps"] for r in steady), max(r["tps"] for r in steady)),
            "mfu": statistics.median(r["mfu"] for r in steady),
            "mem_gib": max(r["mem_gib"] for r in rows),
            "loss_first": rows[0]["loss"], "loss_last": rows[-1]["loss"],
            # every rank logs each step (two lines per step on 2 GPUs): count steps, not lines
            "steps": len({r["step"] for r in rows})}


def parse_level_timing(text: str) -> dict[str, tuple[int, int]]:
    """validate_on_gpu.sh's 'quick: level=quick rc=0 wall=175 s' -> {'quick': (rc, 175)}."""
    out = {}
    for m in re.finditer(r"^(\w+): level=(\w+) rc=(\d+) wall=(\d+) s", text, re.M):
        if m[1] == m[2]:
            out[m[2]] = (int(m[3]), int(m[4]))
    return out


def parse_timing(text: str) -> dict[str, list[tuple[str, str]]]:
    """run_gpu.sh's timing.tsv ('part<TAB>s<TAB>rc', appended by every run in one work
    folder) -> {part: [(s, rc), ...]} in first-run order: one table row per part, the last
    run of it being the one whose results the folder holds."""
    out: dict[str, list[tuple[str, str]]] = {}
    for line in text.splitlines():
        cells = line.split("\t")
        if len(cells) == 3:
            out.setdefault(cells[0], []).append((cells[1], cells[2]))
    return out


def _best(row: RefRow) -> tuple[float, str]:
    return max((row.oop_busbw, "out_of_place"), (row.ip_busbw, "in_place"))


def _fmt(v: float | None, nd: int = 1) -> str:
    return "—" if v is None else f"{v:,.{nd}f}"


class Table:
    def __init__(self) -> None:
        self.lines = ["| what | rackready | reference, same sitting | ratio | target | met |",
                      "| --- | --- | --- | --- | --- | --- |"]
        self.rows: list[dict[str, Any]] = []

    def add(self, what: str, ours: str, ref: str, ratio: float | None, target: str,
            met: bool | None, **data: Any) -> None:
        if any(r["what"] == what for r in self.rows):
            raise ValueError(f"table row {what!r} twice")  # one fact, one row
        mark = "—" if met is None else ("yes" if met else "**no**")
        self.lines.append(f"| {what} | {ours} | {ref} | "
                          f"{'—' if ratio is None else f'{ratio:.3f}'} | {target} | {mark} |")
        self.rows.append({"what": what, "ours": ours, "ref": ref, "ratio": ratio,
                          "target": target, "met": met, **data})


def collective_rows(t: Table, ms: list[dict], refs: dict[str, list[RefRow]]) -> None:
    """One row per op and size: rackready's better eager mode over nccl-tests' better mode,
    each the median over the sitting's rounds (run_gpu.sh alternates the two ROUNDS times,
    so a slow minute of the machine does not land on one side only). Buffers from NCCL's
    allocator where the run recorded one (nccl-tests' own); torch's allocator is shown."""
    runs: dict[tuple[str, int, str, str, str], list[float]] = {}
    for m in ms:
        lab = m["labels"]
        if m["name"] == "nccl.busbw" and lab.get("impl") == "torch":
            key = (str(lab.get("op")), int(lab.get("size_bytes", 0)),
                   str(lab.get("mode", "out_of_place")), str(lab.get("launch", "eager")),
                   str(lab.get("alloc", "torch")))
            runs.setdefault(key, []).append(float(m["value"]))
    main_alloc = "nccl" if any(k[4] == "nccl" for k in runs) else "torch"
    ours = {k[:4]: statistics.median(v) for k, v in runs.items() if k[4] == main_alloc}
    other = {k[:4]: statistics.median(v) for k, v in runs.items() if k[4] != main_alloc}
    nrounds = max((len(v) for k, v in runs.items() if k[3] == "eager"), default=0)
    # every rank and both launch modes report correctness: one row per op, size, mode, launch
    wrong: dict[tuple[str, ...], dict] = {}
    for m in ms:
        if m["name"] == "nccl.correct" and m["value"] is not True:
            lab = m["labels"]
            wrong.setdefault(tuple(str(lab.get(k)) for k in ("op", "size_bytes", "mode",
                                                              "launch")), m)
    for op in OPS:
        ref_rows = {r.size_bytes: r for r in refs.get(op, [])}
        for size in SIZES:
            mine = {(mode, launch): v for (o, s, mode, launch), v in ours.items()
                    if o == op and s == size}
            if not mine and size not in ref_rows:
                continue
            eager = {mode: v for (mode, launch), v in mine.items() if launch == "eager"}
            graph = {mode: v for (mode, launch), v in mine.items() if launch == "graph"}
            best_mode, best = max(((v, k) for k, v in eager.items()), default=(None, None))[::-1]
            ours_txt = " / ".join(f"{_short(k)} {v:.1f}" for k, v in sorted(eager.items()))
            alt = {mode: v for (o, s, mode, launch), v in other.items()
                   if o == op and s == size and launch == "eager"}
            if alt:
                ours_txt += " (torch's allocator: " + " / ".join(
                    f"{_short(k)} {v:.1f}" for k, v in sorted(alt.items())) + ")"
            if nrounds > 1 and eager:
                ours_txt += f" (median of {nrounds} rounds)"
            if graph:
                ours_txt += " (graph: " + " / ".join(
                    f"{_short(k)} {v:.1f}" for k, v in sorted(graph.items())) + ")"
            r = ref_rows.get(size)
            if r is not None:
                refv, refmode = _best(r)
                ref_txt = (f"nccl-tests oop {r.oop_busbw:.1f} / ip {r.ip_busbw:.1f} "
                           f"(best {_short(refmode)}"
                           + (f"; median of {r.rounds} rounds)" if r.rounds > 1 else ")"))
            else:
                refv, ref_txt = None, "nccl-tests not run"
            ratio = best / refv if best is not None and refv else None
            gbest = max(graph.values(), default=None)
            t.add(f"{op} {_size(size)} busbw GB/s", ours_txt or "not run", ref_txt, ratio,
                  f">= {COLL_TARGET} of nccl-tests' better mode",
                  None if ratio is None else ratio >= COLL_TARGET, op=op, size_bytes=size,
                  ours_best_mode=best_mode, ours_best=best, ref_best=refv,
                  graph_ratio=gbest / refv if gbest and refv else None, alloc=main_alloc,
                  rounds=nrounds, ref_rounds=r.rounds if r is not None else 0)
    for (op, size, mode, launch), m in wrong.items():
        t.add(f"WRONG RESULT {op} {size} {mode} {launch}", str(m["value"]), "", None, "exact",
              False)


@dataclasses.dataclass
class RefRow:
    """nccl-tests at one size: each column the median over the sitting's rounds."""
    size_bytes: int
    oop_busbw: float
    ip_busbw: float
    rounds: int


def nccl_tests_rounds(work: Path, op: str) -> list[RefRow]:
    """nccl-tests/<op>.txt (one round) or nccl-tests/r<N>/<op>.txt (one per round)."""
    files = sorted((work / "nccl-tests").glob(f"r*/{op}.txt")) or \
        [p for p in [work / "nccl-tests" / f"{op}.txt"] if p.is_file()]
    by_size: dict[int, list[NcclTestsRow]] = {}
    for f in files:
        for row in parse_nccl_tests(f.read_text(errors="replace"), op):
            by_size.setdefault(row.size_bytes, []).append(row)
    return [RefRow(size, statistics.median(r.oop_busbw for r in rows),
                   statistics.median(r.ip_busbw for r in rows), len(rows))
            for size, rows in sorted(by_size.items())]


def _short(mode: str) -> str:
    return {"out_of_place": "oop", "in_place": "ip"}.get(mode, mode)


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def gemm_rows(t: Table, ms: list[dict]) -> None:
    bare = {m["labels"]["gpu"]: m["value"] for m in ms if m["name"] == "bare.gemm_tflops"}
    for m in ms:
        lab = m["labels"]
        if m["name"] == "gemm.tflops" and lab.get("dtype") == "bf16":
            ref = bare.get(lab.get("gpu"))
            ratio = m["value"] / ref if ref else None
            t.add(f"burn-in bf16 TF/s vs bare matmul loop, gpu{lab.get('gpu')}",
                  _fmt(m["value"]), _fmt(ref), ratio, ">= 0.98",
                  None if ratio is None else ratio >= 0.98)


def _fsdp(ms: list[dict], src: str) -> dict[str, Any] | None:
    rows = [m for m in ms if m["src"] == src]
    if not rows:
        return None

    def one(name: str) -> Any:
        return next((m["value"] for m in rows if m["name"] == name), None)

    mem = [m["value"] for m in rows if m["name"] == "fsdp.peak_memory_gib"]
    res = [m["value"] for m in rows if m["name"] == "fsdp.peak_reserved_gib"]
    loss = {int(m["labels"]["step"]): float(m["value"]) for m in rows if m["name"] == "fsdp.loss"}
    return {"tps": one("fsdp.tokens_per_s_per_gpu"), "mfu": one("fsdp.mfu"),
            "mem_gib": max(mem) if mem else None, "reserved_gib": max(res) if res else None,
            "loss": loss}


def fsdp_rows(t: Table, ms: list[dict], work: Path) -> None:
    for ac, what in (("none", "no activation checkpointing"),
                     ("selective", "selective activation checkpointing (torchtitan's default)")):
        ours = _fsdp(ms, f"fsdp8b_{ac}")
        log = work / f"titan_{ac}.log"
        titan = titan_summary(parse_titan_log(log.read_text(errors="replace"))) \
            if log.is_file() else None
        o_txt = "not run" if not ours or ours["tps"] is None else (
            f"{ours['tps']:,.0f} tok/s/GPU, {_pct(ours['mfu'])} MFU, "
            f"{_fmt(ours['reserved_gib'])} GiB reserved ({_fmt(ours['mem_gib'])} allocated)")
        r_txt = ("torchtitan not run" if not log.is_file() else
                 f"torchtitan: no metric line in {log.name} (failed? see logs/)") if not titan \
            else (
            f"torchtitan {titan['tps']:,.0f} tok/s ({titan['tps_range'][0]:,.0f}-"
            f"{titan['tps_range'][1]:,.0f}), {_pct(titan['mfu'])}, {titan['mem_gib']:.1f} GiB")
        ratio = ours["tps"] / titan["tps"] if ours and ours["tps"] and titan else None
        mem_ok = (ours is not None and titan is not None and ours["reserved_gib"] is not None
                  and ours["reserved_gib"] <= titan["mem_gib"])
        met = None if ratio is None else (ratio >= 1.0 and (ac == "none" or mem_ok))
        t.add(f"reference job llama3-8b seq 8192 compiled, {what}", o_txt, r_txt, ratio,
              ">= 1.0" + (" at <= its memory" if ac != "none" else ""), met, ac=ac,
              rackready=ours and {k: v for k, v in ours.items() if k != "loss"}, titan=titan)
    ours = _fsdp(ms, "fsdp8b_none")
    titan_log = work / "titan_none.log"
    titan = titan_summary(parse_titan_log(titan_log.read_text(errors="replace"))) \
        if titan_log.is_file() else None
    window = next((int(m["labels"]["window"]) for m in ms
                   if m["src"] == "fsdp8b_none" and m["name"] == "fsdp.loss_window_rise"), 4)
    if ours and ours["loss"]:
        wins = loss_windows(ours["loss"], window)
        rise = window_rise(wins)
        curve = ", ".join(f"{v:.2f}" for _, v in sorted(ours["loss"].items()))
        means = " → ".join(f"{m:.2f}" for _, m in wins)
        t.add(f"reference job 8B loss, steps 1-{max(ours['loss'])} (window {window})",
              f"{curve}; window means {means}",
              f"torchtitan {titan['loss_first']:.2f} → {titan['loss_last']:.2f} in "
              f"{titan['steps']} steps" if titan else "torchtitan not run", None,
              "falls at every window", None if rise is None else rise < 0, rise=rise)
    else:
        t.add("reference job 8B loss curve", "not run", "", None, "falls at every window", None)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f} %"


def level_rows(t: Table, work: Path) -> None:
    p = work / "levels-timing.txt"
    got = parse_level_timing(p.read_text()) if p.is_file() else {}
    for level, target in LEVEL_TARGETS.items():
        if level in got:
            rc, wall = got[level]
            t.add(f"{level} level, wall", f"{wall} s (rc {rc})", "—", None,
                  f"<= {target} s on 2 GPUs", wall <= target and rc == 0)
        else:
            t.add(f"{level} level, wall", "not run in this sitting (bench/validate_on_gpu.sh)",
                  "—", None, f"<= {target} s on 2 GPUs", None)


def build(work: Path) -> tuple[str, dict[str, Any]]:
    ms, left_out = load(work)
    refs = {op: rows for op in OPS if (rows := nccl_tests_rounds(work, op))}
    t = Table()
    level_rows(t, work)
    collective_rows(t, ms, refs)
    gemm_rows(t, ms)
    fsdp_rows(t, ms, work)
    head = []
    for name, title in (("command.txt", "Command"), ("env.txt", "Machine and versions")):
        p = work / name
        if p.is_file():
            head += [f"## {title}", "```", p.read_text(errors="replace").strip(), "```", ""]
    timing = work / "timing.tsv"
    if timing.is_file():
        head += ["## Seconds per part", "| part | s | rc | earlier runs (s, rc) |",
                 "| --- | --- | --- | --- |"]
        for part, runs in parse_timing(timing.read_text()).items():
            s, rc = runs[-1]
            earlier = ", ".join(f"{es} s rc {erc}" for es, erc in runs[:-1])
            head.append(f"| {part} | {s} | {rc} | {earlier} |")
        head.append("")
    met = [r["met"] for r in t.rows]
    verdict = (f"{sum(m is True for m in met)} of {len(met)} rows meet their target; "
               f"{sum(m is False for m in met)} miss; {sum(m is None for m in met)} not measured")
    md = "\n".join(["# Issue 15 bench: rackready beside nccl-tests and torchtitan, one sitting",
                    "", verdict, "", *head, "## Table", *t.lines, ""])
    if left_out:
        md += "\nLeft out: " + "; ".join(left_out) + "\n"
    return md, {"rows": t.rows, "summary": verdict, "left_out": left_out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="bench/run_gpu.sh's work folder")
    p.add_argument("--out", type=Path, help="write the markdown here too")
    p.add_argument("--json", type=Path, help="write the rows as JSON here")
    a = p.parse_args(argv)
    if not a.work.is_dir():
        print(f"error: {a.work} is not a folder (bench/run_gpu.sh's work folder)",
              file=sys.stderr)
        return 2
    md, data = build(a.work)
    if a.out:
        a.out.write_text(md, encoding="utf-8")
    if a.json:
        a.json.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
