"""HTML handoff document: decision first, identity, escaping, banners, plots only with data."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from test_report_synthetic import healthy_and_faulty, result, write_run

from rackready.report.build import build_documents
from rackready.report.render.html import render_node_html, render_rack_html
from rackready.report.seal.canonical import seal


def _docs(tmp_path: Path, results=None):
    run = write_run(tmp_path / "run", results) if results else healthy_and_faulty(tmp_path / "run")
    return build_documents(run)


def _section(html: str, sid: str) -> str:
    start = html.index(f'id="{sid}"')
    return html[start:html.index("</section>", start)]


def test_decision_first_then_plots_then_appendix(tmp_path: Path) -> None:
    _, docs = _docs(tmp_path)
    html = render_node_html(docs[1])
    order = [html.index(f'id="{s}"') for s in ("verdict", "identity", "failures", "key-figures",
                                                "plots", "appendix", "signoff")]
    assert order == sorted(order)
    failures = _section(html, "failures")
    # the synthetic node measured no serials: GPU 3 is named by its inventory's
    assert "GPU 3 (serial 1653124042737 as the inventory lists)" in failures
    assert "Remediation:" in failures and "RMA the GPU by serial" in failures
    assert "−10.0 % below floor" in failures  # 540 against a 600 floor
    # provenance is cited, and written out once in the references
    ref = re.search(r'href="#ref-(\d+)">\[\1\]', failures).group(1)
    assert re.search(rf'<li id="ref-{ref}" value="{ref}">H200 sustained bf16 662 TFLOP/s', html)
    assert html.count("H200 sustained bf16 662 TFLOP/s") == 1
    assert ">FAIL<" in html
    identity = _section(html, "decision")
    assert "96.00.A5.00.1A" in identity and "580.159.04" in identity
    assert "1653724027147" in identity  # GPU 0's serial on page 1


def test_key_figures_show_the_weakest_gpu_and_its_margin(tmp_path: Path) -> None:
    _, docs = _docs(tmp_path)
    key = _section(render_node_html(docs[1]), "key-figures")
    row = re.search(r"<tr class=\"v-fail\">(.*?)</tr>", key, re.S).group(1)
    assert "GEMM throughput" in row and "GPU 3" in row and "540 TFLOP/s" in row
    assert "−10.0 % below floor" in row
    assert key.count("<tr class=") == 2  # one row per figure, not one per GPU


def test_key_figures_are_one_row_per_kind_with_the_rows_in_the_appendix(tmp_path: Path) -> None:
    # 32 DIMMs (one running slow) and 32 EDAC counters, as an 8-GPU node reports them
    res = result("gpu01")
    floor = {"metric": "host.dimm_speed_mts", "op": ">=", "value": 4400, "unit": "MT/s",
             "provenance": "profile: DDR5-4400 at two DIMMs per channel"}
    ceiling = {"metric": "host.edac_corrected", "op": "<=", "value": 10, "unit": "",
               "provenance": "policy: a few corrected errors a day"}
    for i in range(32):
        slot = f"{'AB'[i // 16]}{i % 16 + 1}"
        speed = 4000 if slot == "B7" else 4400
        res["verdicts"] += [
            {"check": "host.dimms", "metric": "host.dimm_speed_mts", "value": speed,
             "outcome": "fail" if speed < 4400 else "pass", "unit": "MT/s",
             "labels": {"dimm": slot, "serial": f"C5A7{i:04d}", "rated": "4800"},
             "threshold": floor, "message": "", "remediation": "", "spread": None},
            {"check": "host.memory_errors", "metric": "host.edac_corrected",
             "value": 3 if slot == "A9" else 0, "outcome": "pass", "unit": "",
             "labels": {"dimm": slot, "edac": f"mc{i // 4}/dimm{i % 4}"},
             "threshold": ceiling, "message": "", "remediation": "", "spread": None}]
    _, (doc,) = _docs(tmp_path, [res])
    html = render_node_html(doc)
    key = _section(html, "key-figures")
    rows = re.findall(r"<tr class=\"v-(\w+)\">(.*?)</tr>", key, re.S)
    cells = [[re.sub(r"<[^>]+>", "", c).strip()
              for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for _, r in rows]
    assert [c[0] for c in cells] == ["GEMM throughput", "nccl.busbw_4g",
                                     "host.dimm_speed_mts", "host.edac_corrected"]
    speed, edac = cells[2], cells[3]
    assert speed[1:4] == ["1 of 32 fail", "DIMM slot B7", "4000 MT/s"] and rows[2][0] == "fail"
    assert edac[1:4] == ["32", "DIMM slot A9", "3"] and rows[3][0] == "pass"
    # each DIMM's row is in the appendix
    appendix = _section(html, "appendix")
    assert appendix.count("host.dimm_speed_mts") == 32 and appendix.count("dimm B7") == 2


def test_simulated_is_in_title_banner_and_print_margin(tmp_path: Path) -> None:
    rack, docs = _docs(tmp_path)
    for html in (render_node_html(docs[0]), render_rack_html(rack, docs)):
        assert "<title>SIMULATED — " in html
        assert 'class="sim-banner"' in html
        assert "@top-center" in html and "SIMULATED \\2014 " in html  # every printed page


def test_real_hardware_report_does_not_say_simulated(tmp_path: Path) -> None:
    rack, docs = _docs(tmp_path, [result("gpu01", simulated=False)])
    for html in (render_node_html(docs[0]), render_rack_html(rack, docs)):
        assert "SIMULATED" not in html and "@top-center" not in html


def _resealed(doc: dict, **changes) -> dict:
    d = copy.deepcopy(doc)
    d.update(changes)
    d.pop("sha256", None)
    return seal(d)


def test_partial_and_incomplete_get_a_banner_on_every_page(tmp_path: Path) -> None:
    _, docs = _docs(tmp_path, [result("gpu01", simulated=False)])
    for outcome, words in (("PARTIAL", "PARTIAL \\2014  only part"),
                           ("INCOMPLETE", "INCOMPLETE \\2014  the run did not finish")):
        doc = _resealed(docs[0], outcome=outcome, outcome_reason=f"why {outcome}")
        html = render_node_html(doc)
        assert words in html  # in the @page margin box
        assert 'class="scope-banner"' in html
        assert f"why {outcome}" in _section(html, "decision")
    assert 'class="scope-banner"' not in render_node_html(docs[0])


def test_everything_is_escaped_and_control_characters_stripped(tmp_path: Path) -> None:
    res = result("gpu01", fault_gpu=2)
    bad = "<script>alert(1)</script>"
    failing = next(v for v in res["verdicts"] if v["outcome"] == "fail")
    failing["remediation"] = bad + "\x1b[31m\u202e"
    res["inventory"]["chassis"] = bad
    res["hostname"] = "evil\x07host<b>"
    res["checks"][0]["message"] = bad
    rack, docs = _docs(tmp_path, [res])
    for html in (render_node_html(docs[0]), render_rack_html(rack, docs)):
        assert "<script>" not in html and "host<b>" not in html
        assert "\x1b" not in html and "\x07" not in html and "\u202e" not in html
    html = render_node_html(docs[0])
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 2
    assert "evilhost&lt;b&gt;" in html


def test_plots_appear_for_the_data_present(tmp_path: Path) -> None:
    _, docs = _docs(tmp_path)
    html = render_node_html(docs[1])
    plots = _section(html, "plots")
    for title in ("NCCL bus bandwidth vs message size", "GEMM burn-in over time",
                  "Per-GPU results against their floors", "Training loss vs golden curve"):
        assert f"<title>{title}</title>" in plots
    assert plots.count("<svg") == 4
    assert "fleet median (2 nodes)" in plots  # gemm.tflops has one variant here


def test_no_data_means_no_plot(tmp_path: Path) -> None:
    res = result("gpu01")
    for c in res["checks"]:
        c["measurements"] = [m for m in c["measurements"]
                             if m["name"] not in ("nccl.busbw", "fsdp.loss")
                             and not m["name"].startswith("gemm.interval")]
    res.pop("extra")
    _, docs = _docs(tmp_path, [res])
    html = render_node_html(docs[0])
    assert "NCCL bus bandwidth vs" not in html and "burn-in over time" not in html
    assert "Training loss" not in html
    assert html.count("<svg") == 1  # only the judged per-GPU bars remain


def test_not_applicable_rows_are_counted_with_their_reason(tmp_path: Path) -> None:
    _, docs = _docs(tmp_path)
    html = render_node_html(docs[0])
    na = html[html.index('id="not-applicable"'):html.index('id="references"')]
    assert re.search(r'<td class="num">1</td><td>no InfiniBand HCA on this node</td>', na)
    assert "b-not_applicable\">not applicable" not in _section(html, "appendix")


def test_rack_decision_first_with_one_line_per_node(tmp_path: Path) -> None:
    rack, docs = _docs(tmp_path)
    html = render_rack_html(rack, docs)
    assert html.index('id="verdict"') < html.index('id="nodes"') < html.index('id="failures"')
    nodes = _section(html, "nodes")
    assert nodes.index("gpu02") < nodes.index("gpu01")  # failures first
    assert 'href="node-gpu01.html"' in nodes and 'href="node-gpu02.html"' in nodes
    assert "all 10 judged verdicts passed" in nodes
    assert "GPU 3 (serial 1653124042737 as the inventory lists)" in html
    assert "Per-GPU results across the rack" in html and "gpu02:3" in html
    assert rack["sha256"] in html and "Not signed yet." in html


def test_rack_lists_a_node_that_never_reported_as_incomplete(tmp_path: Path) -> None:
    rack, docs = _docs(tmp_path)
    rack = copy.deepcopy(rack)
    rack["nodes"].append({"node": "gpu03", "outcome": "INCOMPLETE", "simulated": True,
                          "profile": "xe9680-h200-lab", "level": "quick", "report": None,
                          "report_sha256": None, "failures": [],
                          "problems": ["no events and no result.json: the node never started"]})
    html = render_rack_html(rack, docs)
    row = re.search(r'<tr class="n-incomplete">(.*?)</tr>', _section(html, "nodes"), re.S).group(1)
    assert "gpu03" in row and ">INCOMPLETE<" in row
    assert "the node never started" in row and "never reported" in row
    assert 'href="node-gpu03.html"' not in html


def test_signoff_block_shows_signer_algorithm_and_fingerprint(tmp_path: Path) -> None:
    _, docs = _docs(tmp_path)
    signed = _resealed(docs[0], signoff={
        "name": "A. Operator", "date": "2026-12-01", "statement": "I accept.",
        "algorithm": "ed25519", "key_fingerprint": "SHA256:abc123"})
    block = _section(render_node_html(signed), "signoff")
    for text in ("A. Operator", "2026-12-01", "ed25519", "SHA256:abc123", signed["sha256"]):
        assert text in block
    assert "Not signed yet" not in block
    assert "Not signed yet" in _section(render_node_html(docs[0]), "signoff")


def test_node_suite_inventory_shape_gpus_by_index(tmp_path: Path) -> None:
    # validation/runner.py writes {"gpus": {"<index>": {...}}}, not a list.
    res = result("gpu01", fault_gpu=3)
    res["inventory"]["gpus"] = {str(g["index"]): {k: v for k, v in g.items() if k != "index"}
                                for g in res["inventory"]["gpus"]}
    _, docs = _docs(tmp_path, [res])
    html = render_node_html(docs[0])
    assert "GPU 3 (serial 1653124042737 as the inventory lists)" in html
    assert "<th>id</th>" in html and "gpus.0.serial" not in html
    assert "8 × NVIDIA H200" in _section(html, "decision")


def test_rendering_is_reproducible(tmp_path: Path) -> None:
    rack, docs = _docs(tmp_path)
    assert render_node_html(docs[1]) == render_node_html(docs[1])
    assert render_rack_html(rack, docs) == render_rack_html(rack, docs)
