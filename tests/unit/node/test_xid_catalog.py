"""NVIDIA's XID catalog as data (validation/xid_catalog.yml): it loads, it is consistent
(every class known and worded, every row's class its bucket's unless it says why), it holds
the XIDs seen on H100/H200 in the field with the catalog's own buckets, and a site's
override is checked on the controller in one line before any node runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rackready.errors import UserError
from rackready.site.inventory import Node
from rackready.steps.validate import _site
from validation import xid_catalog
from validation.xid_catalog import UNKNOWN, XidCatalogError, load

# XIDs seen on H100/H200 in the field, with the catalog's immediate action and our class
FIELD = {
    8: ("RESTART_APP", "application"), 13: ("RESTART_APP", "application"),
    31: ("RESTART_APP", "application"), 32: ("RESTART_APP", "application"),
    43: ("IGNORE", "ignore"), 45: ("WORKFLOW_XID_45", "application"),
    48: ("WORKFLOW_XID_48", "workflow"), 61: ("CONTACT_SUPPORT", "rma"),
    62: ("RESET_GPU", "reset_gpu"), 63: ("IGNORE", "ignore"), 64: ("RESET_GPU", "reset_gpu"),
    68: ("RESTART_APP", "application"), 69: ("RESTART_APP", "application"),
    74: ("WORKFLOW_NVLINK_ERR", "workflow"), 79: ("RESTART_BM", "reboot_node"),
    92: ("IGNORE", "ignore"), 94: ("RESTART_APP", "application"),
    95: ("RESET_GPU", "reset_gpu"), 109: ("RESET_GPU", "reset_gpu"),
    110: ("RESET_GPU", "reset_gpu"), 119: ("RESET_GPU", "reset_gpu"),
    120: ("RESET_GPU", "reset_gpu"), 121: ("IGNORE", "ignore"),
    136: ("RESET_GPU", "reset_gpu"), 140: ("RESET_GPU", "reset_gpu"),
    143: ("RESET_GPU", "reset_gpu"), 151: ("RESTART_VM", "restart_vm"),
    154: ("XID_154", "workflow"), 155: ("RESET_GPU", "reset_gpu"),
    **{x: ("WORKFLOW_NVLINK5_ERR", "workflow") for x in range(144, 151)},
}


def test_catalog_loads_with_its_provenance_and_every_xid_it_lists():
    cat = load()
    assert cat.url == "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert "2025-10-29" in cat.version
    assert sorted(cat.entries) == list(range(1, 173))
    head = xid_catalog.PATH.read_text().split("\nclasses:")[0]
    assert "Resolution Bucket (Immediate Action)" in head and "leptonai/gpud" in head


def test_catalog_is_consistent():
    """Every class the rows use exists and names an action; application and ignore alone
    never fail a node, every other class does; a row whose class is not its bucket's says
    why; a row the catalog gives no bucket is 'unclassified' and says so; every workflow
    is worded."""
    cat = load()
    raw = yaml.safe_load(xid_catalog.PATH.read_text())
    assert {n for n, c in cat.classes.items() if not c.fails} == {"application", "ignore"}
    assert all(c.action for c in cat.classes.values())
    for x, e in cat.entries.items():
        assert e.cls in cat.classes and e.cls != UNKNOWN, x
        assert e.mnemonic and e.description, x
        bucket_class = raw["buckets"].get(e.immediate, "workflow")
        assert e.cls == bucket_class or e.note, x
        if not e.immediate:
            assert e.cls == "unclassified" and "no resolution bucket" in e.note, x
        if e.cls == "workflow":
            assert cat.workflows[e.immediate], x


@pytest.mark.parametrize("xid", sorted(FIELD))
def test_field_xids_carry_the_catalogs_bucket_and_class(xid):
    e = load().entries[xid]
    assert (e.immediate, e.cls) == FIELD[xid]


def test_a_row_whose_class_contradicts_its_bucket_is_refused(tmp_path: Path):
    row = 'immediate: "RESTART_BM"\n    investigatory: "CONTACT_SUPPORT"\n    class: '
    text = xid_catalog.PATH.read_text()
    assert text.count(row + "reboot_node\n") == 1
    text = text.replace(row + "reboot_node\n", row + "application\n")
    bad = tmp_path / "xid_catalog.yml"
    bad.write_text(text)
    with pytest.raises(XidCatalogError, match=r"XID 79: class application but bucket "
                                              r"'RESTART_BM' gives reboot_node \(no note\)"):
        load(bad)


def test_an_xid_the_catalog_does_not_list_is_unknown_and_fails():
    cat = load()
    assert cat.class_of(999) == UNKNOWN and cat.fails(999)
    assert not cat.fails(13) and cat.fails(79)


def node(site: dict) -> Node:
    return Node(name="gpu01", address="192.0.2.1", profile="p", platform="", fabric="ib",
                user="ops", port=22, key_file=None, known_hosts=None, sysroot="/", lab=False,
                validation_site=site)


def test_controller_ships_a_valid_override_and_refuses_a_bad_one_in_one_line():
    """rackready_validation_site: {xid_overrides: ...} reaches the node's site settings
    (the runs' and the Slurm gate's); a class the catalog lacks or a key that is no XID
    stops the run on the controller with one line naming the node."""
    assert _site(node({"xid_overrides": {13: "reset_gpu"}}))["xid_overrides"] == \
        {"13": "reset_gpu"}
    for bad, said in (({13: "reboot"}, "XID 13: class 'reboot' is not one of application"),
                      ({"13a": "rma"}, "XID '13a' is not an integer")):
        with pytest.raises(UserError) as exc:
            _site(node({"xid_overrides": bad}))
        msg = str(exc.value)
        assert msg.startswith("gpu01: rackready_validation_site: xid_overrides: ") and \
            said in msg and "\n" not in msg


FIELD_119 = (Path(__file__).resolve().parents[2] / "fixtures" / "field" / "kernel-log"
             / "xid-119-gpud-testdata.txt")


def test_parse_xids_reads_a_field_capture_one_event_per_process_run():
    """A public capture (leptonai/gpud testdata, tests/fixtures/field/kernel-log): five XID
    119 lines on one GPU among GSP RPC history lines; the first three from one process in a
    row are one event, the next two from two others: three events, all reset_gpu. Lines
    without a pid/name (older drivers, made from the driver's format, not captured) are an
    event each."""
    from validation.probes.kernel_log import distinct_events, parse_xids

    events = parse_xids(FIELD_119.read_text())
    assert [(e.bus, e.xid) for e in events] == [("0000:9b:00", 119)] * 5
    assert events[0].process == "2024380 nvidia-smi"
    assert [e.process for e in distinct_events(events)] == [
        "2024380 nvidia-smi", "1263500 cache_mgr_main", "1240590 gpud"]
    assert {load().class_of(e.xid) for e in events} == {"reset_gpu"}
    old = ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
           "NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.\n")
    assert [(e.bus, e.process) for e in distinct_events(parse_xids(old))] == \
        [("0000:3b:00", ""), ("0000:3b:00", "")]
