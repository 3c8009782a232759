"""Report documents: schema validity, refusal of PASS for partial results, fleet medians."""

from __future__ import annotations

import copy
import hashlib
import json
import statistics
from pathlib import Path

import pytest
from test_report_synthetic import GEMM_TFLOPS, healthy_and_faulty, result, write_node, write_run

from rackready.report.build import build_documents
from rackready.report.schema import load_schema, schema_errors
from rackready.site.paths import PROJECT_ROOT


def test_every_built_report_validates(tmp_path: Path) -> None:
    rack, docs = build_documents(healthy_and_faulty(tmp_path / "run"))
    for doc in (rack, *docs):
        assert schema_errors(doc) == []
    assert load_schema()["$schema"].endswith("2020-12/schema")
    assert [d["outcome"] for d in docs] == ["PASS", "FAIL"]
    assert rack["outcome"] == "FAIL" and rack["counts"] == {"PASS": 1, "FAIL": 1, "INCOMPLETE": 0,
                                                              "PARTIAL": 0}


@pytest.mark.parametrize("breakage", [
    lambda d: d.pop("sha256"),
    lambda d: d.update(outcome="GREEN"),
    lambda d: d["measurements"][0].pop("unit"),
    lambda d: d["verdicts"][0]["threshold"].pop("provenance"),
    lambda d: d.update(sha256="not-a-hash"),
    lambda d: d.update(complete=False),  # a partial result still saying PASS
    lambda d: d.update(surprise=1),
    lambda d: d["figures_by_kind"][0]["weakest"].pop("component"),
    lambda d: d["figures_by_kind"][0].update(outcome="not_applicable"),
])
def test_a_broken_report_is_rejected(tmp_path: Path, breakage) -> None:
    _, docs = build_documents(healthy_and_faulty(tmp_path / "run"))
    doc = copy.deepcopy(docs[0])
    assert doc["outcome"] == "PASS"
    breakage(doc)
    assert schema_errors(doc)


def test_measurements_carry_their_threshold_provenance(tmp_path: Path) -> None:
    _, docs = build_documents(healthy_and_faulty(tmp_path / "run"))
    m = next(m for m in docs[0]["measurements"] if m["name"] == "gemm.tflops")
    assert m["threshold"]["provenance"].startswith("H200 sustained bf16 662")
    assert m["unit"] == "TFLOP/s"


def test_the_document_groups_its_verdicts_by_kind(tmp_path: Path) -> None:
    # the grouping is the document's (the renderers only word it): one entry per metric
    # and unit, the failing GPU standing for its kind, the kind failing with it
    _, docs = build_documents(healthy_and_faulty(tmp_path / "run"))
    kinds = {(k["metric"], k["unit"]): k for k in docs[1]["figures_by_kind"]}
    assert set(kinds) == {("gpu.count", ""), ("gemm.tflops", "TFLOP/s"),
                          ("nccl.busbw_4g", "GB/s")}  # ib.port_state: not applicable
    gemm = kinds["gemm.tflops", "TFLOP/s"]
    assert gemm["rows"] == 8 and gemm["counts"] == {"fail": 1, "below_expected": 0, "pass": 7}
    assert gemm["outcome"] == "fail" and gemm["direction"] == "floor"
    assert gemm["weakest"]["value"] == 540.0 and gemm["weakest"]["labels"] == {"gpu": "3"}
    assert gemm["weakest"]["component"] == next(
        v["component"] for v in docs[1]["verdicts"] if v["outcome"] == "fail")
    healthy = next(k for k in docs[0]["figures_by_kind"] if k["metric"] == "gemm.tflops")
    assert healthy["outcome"] == "pass" and healthy["weakest"]["labels"] == {"gpu": "0"}


def test_incomplete_node_is_never_pass(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [result("gpu01")])
    write_node(run, result("gpu02"), with_result=False)  # finished stream, result not fetched
    rack, docs = build_documents(run)
    gpu02 = docs[1]
    assert gpu02["outcome"] == "INCOMPLETE" and not gpu02["complete"]
    assert gpu02["verdicts"] == []
    assert "did not finish" in gpu02["outcome_reason"]
    assert rack["outcome"] == "INCOMPLETE" and rack["incomplete_nodes"] == ["gpu02"]


def test_documents_carry_the_controller_judgement_not_the_node_claim(tmp_path: Path) -> None:
    # the node claims PASS; the controller's judgement (judgement.json) says FAIL
    run = write_run(tmp_path / "run", [result("gpu01")])
    path = run / "gpu01" / "judgement.json"
    j = json.loads(path.read_text())
    j["verdicts"][1]["outcome"] = "fail"
    j.update(outcome="FAIL", outcome_reason="1 verdict(s) failed; first: gemm.tflops on GPU 0")
    path.write_text(json.dumps(j))
    rack, docs = build_documents(run)
    assert docs[0]["outcome"] == "FAIL" and docs[0]["claimed_outcome"] == "PASS"
    assert docs[0]["outcome_reason"].startswith("1 verdict")
    assert docs[0]["judge"]["by"] == "controller"
    assert rack["outcome"] == "FAIL"


def test_fleet_median_spans_all_nodes(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [result("gpu01"), result("gpu02", tflops_scale=0.9)])
    _, docs = build_documents(run)
    values = [GEMM_TFLOPS * s * (1 + 0.002 * i) for s in (1.0, 0.9) for i in range(8)]
    med = docs[0]["fleet"]["medians"]["gemm.tflops"]
    assert med["n"] == 16
    assert med["median"] == pytest.approx(statistics.median(round(v, 1) for v in values))


def test_artifact_hash_mismatch_is_reported(tmp_path: Path) -> None:
    res = result("gpu01")
    res["artifacts"] = {"artifacts/a.txt": hashlib.sha256(b"original").hexdigest(),
                        "artifacts/gone.txt": "0" * 64}
    d = write_node(tmp_path, res)
    (d / "artifacts").mkdir()
    (d / "artifacts" / "a.txt").write_bytes(b"changed")
    _, docs = build_documents(tmp_path)
    status = {a["path"]: a["status"] for a in docs[0]["artifacts"]}
    assert status == {"artifacts/a.txt": "mismatch", "artifacts/gone.txt": "missing"}


def test_schema_file_is_published_json(tmp_path: Path) -> None:
    path = PROJECT_ROOT / "rackready/report/schema/report.schema.json"
    assert json.loads(path.read_text())["title"] == "rackready acceptance report"


def _leaves(doc, path=()):
    """Every (path, value) of a JSON document, containers included."""
    yield path, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) \
        if isinstance(doc, list) else ()
    for k, v in items:
        yield from _leaves(v, (*path, k))


def test_the_compiled_check_and_jsonschema_agree_on_every_damage(tmp_path: Path) -> None:
    """schema_errors trusts jsonschema-rs's "valid" and asks jsonschema only otherwise:
    for that to hold, the two must agree. Every kind of damage at a spread of places of a
    node and the rack report: a value of another type, a key removed, a key added."""
    import random

    from jsonschema import Draft202012Validator

    from rackready.report.schema import _fast_validator, _schema_of

    rack, docs = build_documents(healthy_and_faulty(tmp_path / "run"))
    rng = random.Random(7)
    damages = [lambda d, k: d.__setitem__(k, {"x": [1]}), lambda d, k: d.__setitem__(k, "?"),
               lambda d, k: d.__setitem__(k, None), lambda d, k: d.__setitem__(k, -1.5),
               lambda d, k: d.pop(k) if isinstance(d, dict) else d.clear(),
               lambda d, k: d.__setitem__("surprise", 1) if isinstance(d, dict) else None]
    seen = {True: 0, False: 0}
    for doc in (rack, docs[1]):
        slow = Draft202012Validator(_schema_of(doc["kind"]))
        places = [p for p, _ in _leaves(doc) if p]
        for path in rng.sample(places, 40):
            bad = copy.deepcopy(doc)
            parent = bad
            for k in path[:-1]:
                parent = parent[k]
            rng.choice(damages)(parent, path[-1])
            valid = not any(True for _ in slow.iter_errors(bad))
            assert _fast_validator(doc["kind"]).is_valid(bad) == valid, path
            assert (schema_errors(bad) == []) == valid, path
            seen[valid] += 1
    assert seen[True] and seen[False]  # both answers were exercised
