"""JUnit XML for CI systems: one testsuite per node, one testcase per verdict.

fail -> <failure> (message and remediation); not_applicable -> <skipped> (reason);
below_expected -> a passing testcase whose <system-out> starts "BELOW EXPECTED" (a
provisional limit missed short of its gross-fault line; the suite's properties count them);
an incomplete node gets an <error> testcase and a partial (narrowed) run a
<failure> testcase "acceptance", so CI can never read either as green. Text that
came from a node is stripped of control characters and of the rest XML 1.0 forbids
(lone surrogates, U+FFFE, U+FFFF): the file always parses.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from rackready.report import naming
from rackready.sanitize import xml_text


def _case_name(v: dict[str, Any]) -> str:
    labels = naming.labels_text(v["labels"])
    return f"{v['metric']}[{labels}]" if labels else v["metric"]


def node_suite(doc: dict[str, Any]) -> ET.Element:
    suite = ET.Element("testsuite", name=doc["node"], timestamp=doc.get("started") or "")
    props = ET.SubElement(suite, "properties")
    for k in ("run_id", "profile", "level", "outcome", "simulated", "sha256"):
        ET.SubElement(props, "property", name=k, value=str(doc.get(k)))
    for k, v in (doc.get("limits") or {}).items():  # what the verdicts rest on
        ET.SubElement(props, "property", name=f"limits_{k}", value=str(v))
    lm = doc.get("launch_map")
    if lm:  # the launch map, one property: rank:GPU/NIC/NUMA/CPUs; ...
        ET.SubElement(props, "property", name="launch_map", value="; ".join(
            f"{r['rank']}:GPU{r['gpu']}/{r['nic'] or 'none'}/NUMA{r['numa'] or '-'}/"
            f"{r['cpus'] or '-'}" for r in lm["ranks"]))
    for k in ("name", "date", "algorithm", "key_fingerprint"):  # docs/signing.md
        ET.SubElement(props, "property", name=f"signoff_{k}",
                      value=str(doc["signoff"].get(k) or ""))
    failures = skipped = errors = 0
    for v in doc["verdicts"]:
        case = ET.SubElement(suite, "testcase", name=_case_name(v),
                             classname=f"rackready.{doc['node']}.{v['check']}")
        if v["outcome"] == "fail":
            failures += 1
            where = v.get("component") or ""
            msg = v["message"] or f"{v['metric']} failed"
            f = ET.SubElement(case, "failure", message=msg, type=f"{v['scope']}-threshold")
            f.text = "\n".join(filter(None, [
                f"component: {where}" if where else "",
                f"measured: {naming.value_text(v['value'], v['unit'])}",
                f"required: {naming.threshold_text(v['threshold'])}"
                + (f" ({v['threshold']['provenance']})" if v["threshold"] else ""),
                f"remediation: {v['remediation'] or 'none recorded'}",
            ]))
        elif v["outcome"] == "below_expected":
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join([
                f"BELOW EXPECTED: {v['message']}",
                f"expected: {naming.threshold_text(v['threshold'])}"
                + (f" ({v['threshold']['provenance']})" if v["threshold"] else ""),
                f"to look at: {v['remediation'] or 'none recorded'}"])
        elif v["outcome"] == "not_applicable":
            skipped += 1
            ET.SubElement(case, "skipped", message=v["message"] or "not applicable")
    if doc["scope"]["partial"]:
        failures += 1
        case = ET.SubElement(suite, "testcase", name="acceptance",
                             classname=f"rackready.{doc['node']}.run")
        f = ET.SubElement(case, "failure", type="partial",
                          message=f"PARTIAL run: {doc['outcome_reason'] or 'narrowed scope'}"
                                  " - not an acceptance")
        f.text = f"scope: {doc['scope']}"
    if doc["outcome"] == "INCOMPLETE" or doc["problems"]:
        case = ET.SubElement(suite, "testcase", name="run_complete",
                             classname=f"rackready.{doc['node']}.run")
        if doc["outcome"] == "INCOMPLETE":
            errors += 1
            e = ET.SubElement(case, "error", type="incomplete",
                              message=doc["outcome_reason"] or "the node's run is incomplete")
            e.text = "\n".join(doc["problems"]) or "no result.json"
    durations = sum(c["duration_s"] for c in doc["checks"])
    suite.set("tests", str(len(suite.findall("testcase"))))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", f"{durations:.3f}")
    return suite


def render_junit(rack: dict[str, Any], node_docs: list[dict[str, Any]]) -> str:
    root = ET.Element("testsuites", name=f"rackready {rack['run_id']}")
    for doc in node_docs:
        root.append(node_suite(doc))
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(sum(int(s.get(k, "0")) for s in root)))
    root.set("outcome", rack["outcome"])
    ET.indent(root)
    # whatever a node sent: only characters XML 1.0 allows (a parser refuses the file else)
    return xml_text(ET.tostring(root, encoding="unicode", xml_declaration=True)) + "\n"
