"""NVIDIA's XID catalog (validation/xid_catalog.yml): each XID's class and the action the
report names, with a site's overrides (rackready_validation_site: {xid_overrides: ...}).

The catalog is data: which XIDs fail a node alone, which only count toward the profile's
per-GPU limit, and what the operator does (restart the application, reset the GPU, reboot
the node, RMA) follow NVIDIA's table, never a list in code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

PATH = Path(__file__).with_name("xid_catalog.yml")
UNKNOWN = "unknown"  # an XID the catalog does not list


class XidCatalogError(ValueError):
    """A malformed catalog or site override; the message is one line."""


@dataclass(frozen=True)
class XidClass:
    name: str
    fails: bool
    action: str


@dataclass(frozen=True)
class XidEntry:
    xid: int
    mnemonic: str
    description: str
    immediate: str  # the catalog's immediate-action bucket, verbatim
    investigatory: str
    cls: str
    part: str = ""  # the part to replace, where the catalog names it
    note: str = ""  # why the class differs from the bucket, or what the catalog lacks


@dataclass(frozen=True)
class Catalog:
    title: str
    url: str
    version: str
    classes: dict[str, XidClass]
    entries: dict[int, XidEntry]
    workflows: dict[str, str]
    overrides: dict[int, str]  # the site's: XID -> class

    def class_of(self, xid: int) -> str:
        if xid in self.overrides:
            return self.overrides[xid]
        entry = self.entries.get(xid)
        return entry.cls if entry else UNKNOWN

    def fails(self, xid: int) -> bool:
        return self.classes[self.class_of(xid)].fails

    def override_words(self, xid: int) -> str:
        """'13: application -> reset_gpu' where the site reclassified xid, else ''."""
        if xid not in self.overrides:
            return ""
        entry = self.entries.get(xid)
        return f"{xid}: {entry.cls if entry else UNKNOWN} -> {self.overrides[xid]}"

    def with_overrides(self, raw: Any) -> Catalog:
        return Catalog(self.title, self.url, self.version, self.classes, self.entries,
                       self.workflows, parse_overrides(raw, self.classes))


def _class_for_bucket(bucket: str, buckets: dict[str, str]) -> str:
    return buckets.get(bucket, "workflow")


@lru_cache(maxsize=2)
def load(path: Path = PATH) -> Catalog:
    raw = yaml.safe_load(path.read_text())
    where = path.name
    try:
        meta, classes_raw = raw["catalog"], raw["classes"]
        buckets, rows = raw["buckets"], raw["xids"]
    except (TypeError, KeyError) as exc:
        raise XidCatalogError(f"{where}: needs catalog, classes, buckets and xids ({exc})"
                              ) from None
    classes = {str(n): XidClass(str(n), bool(c["fails"]), str(c["action"]))
               for n, c in classes_raw.items()}
    if UNKNOWN not in classes:
        raise XidCatalogError(f"{where}: no '{UNKNOWN}' class for XIDs it does not list")
    for bucket, cls in buckets.items():
        if cls not in classes:
            raise XidCatalogError(f"{where}: bucket {bucket!r} maps to unknown class {cls!r}")
    workflows = {str(k): str(v) for k, v in (raw.get("workflows") or {}).items()}
    entries = {}
    for xid, row in rows.items():
        if not isinstance(xid, int) or isinstance(xid, bool):
            raise XidCatalogError(f"{where}: XID {xid!r} is not an integer")
        e = XidEntry(xid, str(row["mnemonic"]), str(row["description"]),
                     str(row["immediate"]), str(row["investigatory"]), str(row["class"]),
                     str(row.get("part", "")), str(row.get("note", "")))
        if e.cls not in classes:
            raise XidCatalogError(f"{where}: XID {xid}: unknown class {e.cls!r}")
        # the class follows the bucket unless the row says why not
        if e.cls != _class_for_bucket(e.immediate, buckets) and not e.note:
            raise XidCatalogError(f"{where}: XID {xid}: class {e.cls} but bucket "
                                  f"{e.immediate!r} gives "
                                  f"{_class_for_bucket(e.immediate, buckets)} (no note)")
        if e.cls == "workflow" and e.immediate not in workflows:
            raise XidCatalogError(f"{where}: XID {xid}: workflow {e.immediate!r} "
                                  "has no entry under workflows")
        entries[xid] = e
    return Catalog(str(meta["title"]), str(meta["url"]), str(meta["version"]), classes,
                   entries, workflows, {})


def parse_overrides(raw: Any, classes: dict[str, XidClass] | None = None) -> dict[int, str]:
    """A site's xid_overrides ({XID: class}) checked: an XID that is not an integer or a
    class the catalog does not have is refused in one line."""
    if raw is None:
        return {}
    known = classes if classes is not None else load().classes
    names = sorted(n for n in known if n != UNKNOWN)
    if not isinstance(raw, dict):
        raise XidCatalogError(f"xid_overrides must map XIDs to classes "
                              f"({', '.join(names)}), got {type(raw).__name__}")
    out = {}
    for key, cls in raw.items():
        text = str(key).strip()
        if isinstance(key, bool) or not text.isdigit():
            raise XidCatalogError(f"xid_overrides: XID {key!r} is not an integer")
        if str(cls) not in names:
            raise XidCatalogError(f"xid_overrides: XID {text}: class {cls!r} is not one of "
                                  f"{', '.join(names)}")
        out[int(text)] = str(cls)
    return out


def for_site(site: dict[str, Any] | None) -> Catalog:
    """The catalog with the site's overrides applied (site settings: xid_overrides)."""
    return load().with_overrides((site or {}).get("xid_overrides"))


def xid_list(labels: dict[str, str]) -> list[int]:
    """The XIDs a measurement's `xids` label names ('13,31' -> [13, 31])."""
    return [int(x) for x in labels.get("xids", "").split(",") if x.strip().isdigit()]


def remediation(cls: str, labels: dict[str, str], component: str) -> str:
    """What the report tells the operator for XIDs of one class on one part: the class's
    action, the part the catalog names, the workflow it points to."""
    cat = load()
    klass = cat.classes.get(cls) or cat.classes[UNKNOWN]
    xids = xid_list(labels)
    action = klass.action.replace("<bus id>", labels.get("bus_id") or "<bus id>")
    words = [f"{component}: {action}"]
    for x in xids:
        e = cat.entries.get(x)
        if e is None:
            continue
        if cls == "workflow" and e.immediate in cat.workflows:
            words.append(f"XID {x} ({e.mnemonic}): {e.immediate}: {cat.workflows[e.immediate]}")
        if e.part:
            words.append(f"the catalog names the part for XID {x}: replace {e.part}")
        if cls in ("reset_gpu", "reboot_node") and e.investigatory == "CONTACT_SUPPORT":
            words.append(f"if XID {x} recurs, replace the GPU (RMA by serial): the catalog's "
                         "investigatory action is CONTACT_SUPPORT")
    if cls == UNKNOWN:
        words.append(cat.url)
    return "; ".join(dict.fromkeys(words))
