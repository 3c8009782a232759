"""views: margins, figures by kind and the key figures, collapsed appendix rows, numbered
references, plot data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rackready.report import kinds, naming
from rackready.report.views import figures, page, tables

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "h200x2-quick-result.json.gz"


@pytest.mark.parametrize("value, op, limit, want", [
    (671.58, ">=", 600.0, "+11.9 % above floor"),
    (540.0, ">=", 600.0, "\u221210.0 % below floor"),
    (30.0, "<=", 85, "+64.7 % below ceiling"),
    (90.0, "<=", 85, "\u22125.9 % above ceiling"),
])
def test_margin_to_a_floor_or_ceiling(value, op, limit, want) -> None:
    assert naming.margin(value, {"op": op, "value": limit})[1] == want


@pytest.mark.parametrize("value, t", [
    (0, {"op": "<=", "value": 0}),          # an error counter has no percentage
    ("2.28.3", {"op": "==", "value": "2.28.9"}),
    (True, {"op": ">=", "value": 1}),
    (5, None),
])
def test_no_margin_where_it_means_nothing(value, t) -> None:
    assert naming.margin(value, t) is None


def test_clean_strips_controls_and_bidi_overrides() -> None:
    assert naming.clean("a\x1b[31mb\u202ec\nd\te\x00") == "a[31mbc d e"


def _row(check, metric, outcome, value, labels=None, t=None, msg=""):
    return {"check": check, "metric": metric, "outcome": outcome, "value": value, "unit": "GB/s",
            "labels": labels or {}, "threshold": t, "message": msg, "remediation": "",
            "spread": None, "scope": "node"}


def _doc(verdicts, checks=(), measurements=(), **extra):
    return {"node": "n1", "outcome": "FAIL", "verdicts": list(verdicts), "checks": list(checks),
            "measurements": list(measurements), "inventory": {}, "thresholds": [], **extra}


def _with_kinds(doc):
    return {**doc, "figures_by_kind": kinds.figures_by_kind(doc["verdicts"])}


def _dimm(outcome, value, slot, t, metric="host.dimm_speed_mts", unit="MT/s"):
    return {**_row("host.dimms", metric, outcome, value, {"dimm": slot, "serial": f"S{slot}"},
                   t), "unit": unit, "component": f"DIMM slot {slot} (serial S{slot})"}


FLOOR = {"op": ">=", "value": 4400, "unit": "MT/s", "provenance": "profile"}
CEILING = {"op": "<=", "value": 10, "unit": "", "provenance": "policy"}


def test_figures_by_kind_one_row_per_metric_and_unit_with_the_weakest() -> None:
    speeds = [_dimm("pass", 4800 - 10 * i, f"A{i}", FLOOR) for i in range(32)]
    errors = [_dimm("pass", e, f"A{i}", CEILING, "host.edac_corrected", "")
              for i, e in enumerate([0] * 5 + [7] + [3] + [0] * 25)]
    na = [_row("judge", "host.edac_corrected", "not_applicable", None)]
    groups = kinds.figures_by_kind(speeds + errors + na)
    assert [(g["metric"], g["unit"], g["rows"]) for g in groups] == [
        ("host.dimm_speed_mts", "MT/s", 32), ("host.edac_corrected", "", 32)]
    speed, edac = groups
    # against a floor the lowest, against a ceiling the highest
    assert speed["direction"] == "floor" and speed["weakest"]["value"] == 4490
    assert speed["weakest"]["component"] == "DIMM slot A31 (serial SA31)"
    assert edac["direction"] == "ceiling" and edac["weakest"]["value"] == 7
    assert edac["weakest"]["labels"]["dimm"] == "A5"
    assert speed["outcome"] == "pass" and speed["counts"] == {
        "fail": 0, "below_expected": 0, "pass": 32}
    assert speed["varies"] == ["dimm", "serial"]


def test_a_failing_row_stands_for_its_kind_and_sets_its_outcome() -> None:
    # a row that failed without a number (nothing to order by) still outranks every pass,
    # and one below expected outranks a pass with less room
    rows = [_dimm("pass", 4400, "A0", FLOOR), _dimm("fail", None, "B3", FLOOR),
            _dimm("below_expected", 4500, "A1", FLOOR), _dimm("pass", 4400, "A2", FLOOR)]
    (g,) = kinds.figures_by_kind(rows)
    assert g["outcome"] == "fail" and g["weakest"]["component"].startswith("DIMM slot B3")
    assert g["counts"] == {"fail": 1, "below_expected": 1, "pass": 2}
    (g,) = kinds.figures_by_kind([r for r in rows if r["outcome"] != "fail"])
    assert g["outcome"] == "below_expected" and g["weakest"]["labels"]["dimm"] == "A1"


def test_rows_under_different_limits_compare_by_their_room() -> None:
    # one floor per message size: 250 over a floor of 240 is closer than 60 over 50
    rows = [_row("nccl", "nccl.busbw", "pass", v, {"op": op, "size_bytes": size},
                 {"op": ">=", "value": floor, "unit": "GB/s", "provenance": "bench"})
            for op, size, v, floor in (("all_reduce", "1048576", 60.0, 50.0),
                                       ("all_gather", "4294967296", 250.0, 240.0),
                                       ("all_reduce", "4294967296", 300.0, 240.0))]
    (g,) = kinds.figures_by_kind(rows)
    assert g["weakest"]["labels"] == {"op": "all_gather", "size_bytes": "4294967296"}
    assert g["varies"] == ["op", "size_bytes"]


def test_key_figures_word_each_kind_once() -> None:
    t = {"op": ">=", "value": 100.0, "unit": "GB/s", "provenance": "bench"}
    hbm = [{**_row("hbm", "hbm.bandwidth", "pass", v, {"gpu": str(i)}, t),
            "component": f"GPU {i} (serial 16{i}, PCI 0000:0{i}:00.0)"}
           for i, v in enumerate((130.0, 104.0, 120.0))]
    speeds = [_dimm("pass", 4800, f"A{i}", FLOOR) for i in range(31)]
    speeds.insert(7, _dimm("fail", 4000, "B7", FLOOR))
    rows = tables.key_figures(_with_kinds(_doc(hbm + speeds)), page.References())
    assert [(r["name"], r["how_many"], r["where"], r["outcome"]) for r in rows] == [
        ("HBM bandwidth", "3", "GPU 1", "pass"),
        ("host.dimm_speed_mts", "1 of 32 fail", "DIMM slot B7", "fail")]
    assert rows[0]["margin"] == "+4.0 % above floor"
    assert rows[1]["measured"] == "4000 MT/s" and rows[1]["margin"] == "\u22129.1 % below floor"


def test_references_number_each_distinct_text_once() -> None:
    a = {"op": ">=", "value": 1, "unit": "", "provenance": "source A"}
    b = {"op": ">=", "value": 2, "unit": "", "provenance": "source B\x07"}
    refs = page.References()
    assert [refs.cite(x) for x in (a, b, a, None, b)] == [1, 2, 1, None, 2]
    assert refs.items() == [(1, "source A"), (2, "source B")]


def test_appendix_collapses_identical_passes_and_keeps_each_failure() -> None:
    t = {"op": "<=", "value": 0, "unit": "", "provenance": "policy"}
    rows = [_row("nvlink", "nvlink.crc", "pass", 0, {"gpu": g, "link": str(k)}, t)
            for g in "01" for k in range(18)]
    rows += [_row("nvlink", "nvlink.crc", "fail", 3, {"gpu": "1", "link": "4"}, t)]
    rows += [_row("judge", "storage.fio_read", "not_applicable", None, msg=(
        "storage.fio_read not measured in this run (level, scope or a check that did not run)"))]
    ap = tables.appendix(_doc(rows), page.References())
    (g,) = ap["groups"]  # "judge" held only N/A rows: counted below, no empty table
    assert [(r.outcome, r.count) for r in g.rows] == [("fail", 1), ("pass", 36)]
    assert g.rows[1].where == "GPU 0, 1 · 36 links" and g.rows[1].measured == "all 0 GB/s"
    assert ap["not_applicable"] == [{
        "reason": "not measured in this run (level, scope or a check that did not run)",
        "count": 1, "items": ["storage.fio_read"]}]


def test_busbw_references_come_only_from_the_provenance_text() -> None:
    text = ("floor for every size: nccl-tests 2.19.6 (NCCL 2.28.9, 2x H200, NVLS off): "
            "44.75 GB/s at 1 MiB; measured: 259.9 GB/s all_reduce 64 MiB (torch.distributed)")
    refs = page.provenance_references(text, "all_reduce")
    assert refs["nccl-tests"] == (1 << 20, 44.75, "nccl-tests 2.19.6")
    assert refs["bench"] == (64 << 20, 259.9, "bench")
    borrowed = ("nccl-tests 2.19.6 (NCCL 2.28.9) has no broadcast: all_gather's 31.92 GB/s "
                "at 1 MiB used")
    assert page.provenance_references(borrowed, "broadcast") == {}
    assert "bench" not in page.provenance_references(text, "all_gather")


def _real_doc() -> dict:
    r = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    ms = [{"check": c["check"], "name": m["name"], "value": m.get("value"),
           "unit": m.get("unit", ""), "labels": {k: str(v) for k, v in m["labels"].items()},
           "series": any(k in m["labels"] for k in ("t_s", "step", "size_bytes"))}
          for c in r["checks"] for m in c["measurements"]]
    return {**r, "measurements": ms, "verdicts": [{**v, "scope": "node"} for v in r["verdicts"]],
            "golden_loss": [], "fleet": {}}


def test_real_run_plots_carry_floors_and_split_by_dtype() -> None:
    doc = _real_doc()
    bus = figures.busbw_figure(doc)
    panel = next(p for p in bus.panels if p.title == "all_reduce")
    styles = {line.style: line for line in panel.lines}
    assert styles["measured"].points == [(64 << 20, 265.805), (1 << 30, 331.466)]
    assert (1 << 30, 296.1) in styles["floor"].points
    assert styles["reference"].points == [(1 << 20, 44.75)]
    assert [h.value for h in panel.hlines] == [22.4]
    burn = figures.burnin_figure(doc)
    titles = [p.title for p in burn.panels]
    assert "GEMM throughput, bf16" in titles and "GEMM throughput, fp8" in titles
    bf16 = burn.panels[titles.index("GEMM throughput, bf16")]
    assert [h.value for h in bf16.hlines] == [600.0]
    assert [line.label for line in bf16.lines] == ["GPU 0", "GPU 1"]
    bars = figures.per_gpu_figure(doc)
    gemm = [p for p in bars.panels if p.title.startswith("GEMM throughput")]
    assert [p.title for p in gemm] == ["GEMM throughput, bf16", "GEMM throughput, fp8"]
    assert [h.value for h in gemm[1].hlines] == [1095.0]  # no median across dtypes


def test_constant_series_are_not_plotted() -> None:
    ms = [{"check": "g", "name": name, "value": v, "unit": "", "series": True,
           "labels": {"gpu": "0", "t_s": str(t)}}
          for t in range(5) for name, v in (("gemm.interval_tflops", 600 + t),
                                            ("gemm.interval_power_w", 0.0))]
    fig = figures.burnin_figure(_doc([], measurements=ms))
    assert [p.title for p in fig.panels] == ["GEMM throughput"]
