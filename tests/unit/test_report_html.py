"""HTML handoff document: order, identity, escaping, SIMULATED, plots only with data."""

from __future__ import annotations

from pathlib import Path

from test_report_synthetic import healthy_and_faulty, result, write_run

from rackready.report.build import build_documents
from rackready.report.html import render_node_html, render_rack_html


def _docs(tmp_path: Path, results=None):
    run = write_run(tmp_path / "run", results) if results else healthy_and_faulty(tmp_path / "run")
    return build_documents(run)


def test_verdict_first_then_failures_with_remediation_and_serial(tmp_path: Path) -> None:
    _, docs = _docs(tmp_path)
    html = render_node_html(docs[1])
    assert html.index('id="verdict"') < html.index('id="failures"') < html.index('id="identity"')
    assert html.index('id="failures"') < html.index('id="verdicts"')
    failures = html[html.index('id="failures"'):html.index('id="identity"')]
    assert "GPU 3 (serial 1653124042737)" in failures  # derived serial of GPU 3
    assert "Remediation:" in failures and "RMA the GPU by serial" in failures
    assert "H200 sustained bf16 662 TFLOP/s" in failures  # threshold provenance
    assert ">FAIL<" in html
    # identity from the real capture
    assert "96.00.A5.00.1A" in html and "580.159.04" in html and "1653724027147" in html


def test_simulated_is_in_title_banner_and_print_margin(tmp_path: Path) -> None:
    rack, docs = _docs(tmp_path)
    for html in (render_node_html(docs[0]), render_rack_html(rack, docs)):
        assert "<title>SIMULATED — " in html
        assert 'class="sim-banner"' in html
        assert "@top-center" in html  # repeats on every printed page


def test_real_hardware_report_does_not_say_simulated(tmp_path: Path) -> None:
    rack, docs = _docs(tmp_path, [result("gpu01", simulated=False)])
    for html in (render_node_html(docs[0]), render_rack_html(rack, docs)):
        assert "SIMULATED" not in html


def test_everything_is_escaped(tmp_path: Path) -> None:
    res = result("gpu01", fault_gpu=2)
    bad = "<script>alert(1)</script>"
    res["verdicts"][3]["message"] = bad
    res["inventory"]["chassis"] = bad
    res["checks"][0]["message"] = bad
    _, docs = _docs(tmp_path, [res])
    html = render_node_html(docs[0])
    assert "<script>" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3


def test_plots_appear_for_the_data_present(tmp_path: Path) -> None:
    _, docs = _docs(tmp_path)
    html = render_node_html(docs[1])
    for title in ("NCCL bus bandwidth vs message size", "GEMM throughput over the burn-in",
                  "Board power over the burn-in", "SM clock over the burn-in",
                  "gemm.tflops per GPU", "FSDP training loss vs golden curve"):
        assert f"<title>{title}</title>" in html
    assert "fleet median (2 nodes)" in html
    assert html.count("<svg") == 6


def test_no_data_means_no_plot(tmp_path: Path) -> None:
    res = result("gpu01")
    for c in res["checks"]:
        c["measurements"] = [m for m in c["measurements"]
                             if m["name"] not in ("nccl.busbw", "fsdp.loss")
                             and not m["name"].startswith("gemm.interval")]
    res.pop("extra")
    _, docs = _docs(tmp_path, [res])
    html = render_node_html(docs[0])
    assert "NCCL bus bandwidth" not in html and "over the burn-in" not in html
    assert "FSDP training loss" not in html
    assert html.count("<svg") == 1  # only the judged per-GPU bars remain


def test_rack_lists_every_node_and_fleet_bars(tmp_path: Path) -> None:
    rack, docs = _docs(tmp_path)
    html = render_rack_html(rack, docs)
    assert 'href="node-gpu01.html"' in html and 'href="node-gpu02.html"' in html
    assert "gemm.tflops per GPU across the rack" in html
    assert "GPU 3 (serial 1653124042737)" in html
    assert rack["sha256"] in html and "Not signed yet." in html


def test_node_suite_inventory_shape_gpus_by_index(tmp_path: Path) -> None:
    # validation/runner.py writes {"gpus": {"<index>": {...}}}, not a list.
    res = result("gpu01", fault_gpu=3)
    res["inventory"]["gpus"] = {str(g["index"]): {k: v for k, v in g.items() if k != "index"}
                                for g in res["inventory"]["gpus"]}
    res["extra"]["golden_loss"] = {"0": 12.5, "45": 4.6}
    _, docs = _docs(tmp_path, [res])
    html = render_node_html(docs[0])
    assert "GPU 3 (serial 1653124042737)" in html
    assert "<th>id</th>" in html and "gpus.0.serial" not in html
    assert docs[0]["golden_loss"] == [{"step": 0.0, "loss": 12.5}, {"step": 45.0, "loss": 4.6}]
