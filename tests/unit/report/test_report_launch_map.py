"""The node report's launch map: table and snippets in JSON (schema-valid), HTML and JUnit,
from a node result carrying pcie.launch_map measured on a real capture's layout."""

from __future__ import annotations

from pathlib import Path

from test_launch_map import hgx_h200  # the capture's map, as the node test builds it
from test_report_synthetic import result, write_run

from rackready.report.build import build_documents
from rackready.report.render.html import render_node_html
from rackready.report.render.junit import node_suite
from rackready.report.schema import schema_errors
from validation.checks.pcie import launch_measurements


def _doc(tmp_path: Path) -> dict:
    res = result("gpu01")
    res["checks"].append({"check": "pcie.launch_map", "status": "ok", "duration_s": 0.1,
                          "needs": ["gpu", "rdma"], "message": "", "measurements": [
                              m.to_dict() for m in launch_measurements(hgx_h200())]})
    _, docs = build_documents(write_run(tmp_path / "run", [res]))
    return docs[0]


def test_json_document_carries_the_map_and_validates(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    assert schema_errors(doc) == []
    ranks = doc["launch_map"]["ranks"]
    assert [(r["rank"], r["gpu"], r["nic"], r["numa"]) for r in ranks[:2]] == [
        (0, 0, "mlx5_0", "0"), (1, 1, "mlx5_3", "0")]
    assert ranks[1]["cpus"] == "14-27,126-139"
    assert "NICS=(mlx5_0 mlx5_3" in doc["launch_map"]["torchrun"]
    # every GPU visible in map order (cuda:LOCAL_RANK is the rank's), and Slurm asked for them
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in doc["launch_map"]["torchrun"]
    assert "--gpus-per-node=8 --cpu-bind=none" in doc["launch_map"]["slurm"]


def test_html_and_junit_show_the_table(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    html = render_node_html(doc)
    table = html[html.index('id="launch-map-table"'):html.index("</table>",
                                                                  html.index('id="launch-map-table"'))]
    assert "<td>1</td><td>GPU 1 (0000:1a:00.0)</td><td>mlx5_3</td>" in table
    assert table.count("<tr>") == 9  # header and 8 ranks
    assert "exec taskset -c" in html and "--ntasks-per-node=8 --gpus-per-node=8" in html
    props = {p.get("name"): p.get("value") for p in node_suite(doc).iter("property")}
    assert props["launch_map"].startswith("0:GPU0/mlx5_0/NUMA0/0-13,112-125; 1:GPU1/mlx5_3/")


def test_a_node_without_the_check_has_no_map(tmp_path: Path) -> None:
    _, docs = build_documents(write_run(tmp_path / "run", [result("gpu01")]))
    assert docs[0]["launch_map"] is None and schema_errors(docs[0]) == []
    assert 'id="launch-map"' not in render_node_html(docs[0])
