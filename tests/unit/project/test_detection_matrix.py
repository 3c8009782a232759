"""docs/detection.md stays true: every cited test exists, every simulated fault kind
has a row, and every check a finished row names exists."""

from __future__ import annotations

import re

from fault_expectations import FAULT_FAMILIES, LAB_FAULT_KINDS
from test_docs_test_ids import CITED, missing_tests

from rackready.decide.rack import RACK_CHECKS
from rackready.site.paths import PROJECT_ROOT
from rackready_lab.hwsim.faults import FAULT_KINDS
from validation.checks.catalog import all_checks

ROOT = PROJECT_ROOT
DOC = ROOT / "docs" / "detection.md"
# the kinds issue #16 adds: each must have a row (TODO until its tests exist)
NEW_KINDS = ("sxid", "nvme-media-errors", "nvme-wear-out", "dimm-missing",
             "edac-uncorrectable", "aer-storm", "link-flap", "slow-rail", "transceiver-hot")


def rows(text: str) -> list[list[str]]:
    """Table rows with a fault kind in backticks in the second column."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"`[\w-]+`", cells[1]):
            out.append(cells)
    return out


def check_names(cell: str) -> list[str]:
    """Backticked names in a 'Caught by' cell, minus the 'expected' ones of TODO rows
    and metric names in parentheses."""
    cell = re.sub(r"\([^)]*\)", "", cell)
    return re.findall(r"(?<!expected )`([\w.]+)`", cell)


def test_every_cited_test_exists():
    count, missing = missing_tests(DOC, ROOT / "tests")
    assert count >= 25 and missing == []


def test_every_fault_kind_has_a_row_and_finished_rows_cite_tests_and_real_checks():
    table = {r[1].strip("`"): r for r in rows(DOC.read_text())}
    assert not [k for k in (*FAULT_KINDS, *NEW_KINDS) if k not in table]
    known = set(all_checks()) | set(RACK_CHECKS)
    for kind in FAULT_KINDS:
        _, _, caught, _, tests = table[kind]
        todo = tests.startswith("TODO")
        if kind in NEW_KINDS and todo:
            continue  # the lead fills it at merge
        assert not todo, f"{kind}: in FAULTS, its row is still TODO"
        assert CITED.search(tests), f"{kind}: no test cited"
        names = check_names(caught)
        assert names and set(names) <= known, (kind, names)


def test_rack_rows_name_the_rack_checks():
    text = DOC.read_text()
    for name in RACK_CHECKS:
        assert f"`{name}`" in text


def test_a_kind_without_a_row_or_a_check_that_does_not_exist_is_caught(tmp_path):
    doc = "| c | `gpu-missing` | `gpu.inventory`, `gpu.nonsense` | x | `unit/test_a.py` |\n"
    (r,) = rows(doc)
    assert set(check_names(r[2])) - set(all_checks()) == {"gpu.nonsense"}
    assert [k for k in FAULT_KINDS if k not in {x[1].strip("`") for x in rows(doc)}]
    todo = "| c | `sxid` | expected `fabric.nvswitch_errors` | x | TODO |\n"
    assert check_names(rows(todo)[0][2]) == []


LAB_TEST = "lab/test_faults_lab.py::test_fault_fails_the_node_naming_the_part"


def test_fault_families_hold_every_kind_once_and_the_lab_rows_say_which_run_over_ssh():
    kinds = [k for family in FAULT_FAMILIES.values() for k in family]
    # a new kind must join a family (or start one), so its family still runs on the lab
    assert sorted(kinds) == sorted(FAULT_KINDS) and len(kinds) == len(set(kinds))
    assert all(FAULT_FAMILIES.values())
    assert tuple(family[0] for family in FAULT_FAMILIES.values()) == LAB_FAULT_KINDS
    table = {r[1].strip("`"): r for r in rows(DOC.read_text())}
    cites_lab = {k for k in FAULT_KINDS if LAB_TEST in table[k][4]}
    assert cites_lab == set(LAB_FAULT_KINDS)
