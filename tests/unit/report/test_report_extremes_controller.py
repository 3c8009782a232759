"""Numbers at the edge through the real controller: an in-process SSH
node (tests/unit/fake_node.py) whose result.json carries message-size labels "0", "-4096"
and "nan", GEMM rates of 1.7e308 (their fleet median once overflowed to infinity) and
burn-in intervals of -0.0 and 1e-320. `invoke validate` once ended in a traceback: no
rack.html, no JUnit, no exit code. Now every report is written and the run has its code,
the impossible rates are read as not measured (the node INCOMPLETE, never PASS);
a renderer that fails still leaves the other formats and says so in one line."""

from __future__ import annotations

import json
from pathlib import Path

import paramiko
import pytest
from test_validate_controller import NODES, rack  # noqa: F401 -- the fixture's rack

from rackready.report import build
from rackready.report.errors import ReportError
from rackready.steps import validate

SIZES = ("0", "-4096", "nan")


def _edge_values(out: Path, channel: paramiko.Channel) -> None:
    res = json.loads((out / "result.json").read_text())
    check = next(c for c in res["checks"] if c["check"] == "kernel.cmdline")

    def m(name: str, value: float, unit: str, **labels: str) -> dict:
        return {"name": name, "value": value, "unit": unit, "labels": labels,
                "artifact": None}

    check["measurements"] += [
        *(m("nccl.busbw", 300.0, "GB/s", op="all_reduce", size_bytes=s) for s in SIZES),
        m("nccl.busbw", 310.0, "GB/s", op="all_reduce", size_bytes=str(1 << 30)),
        *(m("gemm.tflops", 1.7e308, "TFLOP/s", gpu=g, dtype="bf16") for g in ("0", "1")),
        *(m("gemm.interval_tflops", v, "TFLOP/s", gpu="0", dtype="bf16", t_s=str(t))
          for t, v in enumerate((-0.0, 1e-320, 650.0))),
    ]
    (out / "result.json").write_text(json.dumps(res))


def test_a_node_at_the_edge_of_a_float_leaves_every_report_and_the_exit_code(
        rack, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    def after(command: str, channel: paramiko.Channel) -> None:
        if " validation run " in command:  # the suite, not a preparation command
            (out,) = (rack / "good" / "base" / "runs").glob("*/out")
            _edge_values(out, channel)

    NODES["good"].after_exec = after
    out = rack / "run"
    code = validate.run_validation(node="gpu01", inventory="test", level="quick",
                                   out=str(out), formats="json,html,junit",
                                   only="gpu.inventory,kernel.cmdline")
    assert code == 1  # a narrowed run is never a PASS; the run has its exit code
    report = out / "report"
    for name in ("rack.json", "rack.html", "junit.xml", "node-gpu01.html"):
        assert (report / name).is_file(), name
    node = json.loads((report / "node-gpu01.json").read_text())
    # no GEMM at 1.7e308 reaches a figure or a median: the controller reads it as not
    # measured and names it (the loader's clamp is the renderers' own guard behind that)
    assert node["outcome"] == "INCOMPLETE"
    assert "gemm.tflops" not in node["fleet"]["medians"]
    problems = "\n".join(node["problems"])
    assert ".value 1.7e+308 is beyond +-1e+18" in problems
    for size in SIZES:
        assert f"label size_bytes '{size}' is not a number" in problems

    # a renderer's own bug: the other formats are still written, the failure one line
    def broken(doc: dict) -> str:
        raise RuntimeError("a renderer's bug\nover two lines")

    monkeypatch.setattr(build, "render_node_html", broken)
    (report / "junit.xml").unlink()
    with pytest.raises(ReportError) as caught:
        build.render_reports(report, {"html", "junit", "pdf"})
    said = str(caught.value)
    assert "\n" not in said and said.startswith("HTML renderer failed: RuntimeError")
    assert "the other reports were written" in said
    assert (report / "junit.xml").is_file() and report / "junit.xml" in caught.value.written
