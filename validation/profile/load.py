"""Loading a profile: its files read, composed by inheritance, every threshold checked.

A profile is written as what differs from its bases (`extends:`, files named `_*.yml`:
a common base, a chassis, a GPU overlay), merged deeply (load_profile says how). A
`-lab` variant says `extends: <profile>` and `simulated: true`; it inherits the inventory
and may override thresholds, but never loosen a health limit. Anything malformed raises
ProfileError with a one-line message.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from validation.model import Threshold
from validation.profile.errors import ProfileError, err
from validation.profile.inventory_limits import check_inventory, inventory_thresholds
from validation.profile.model import Profile, threshold_key
from validation.profile.not_applicable import NotApplicable, check_not_applicable
from validation.profile.provenance import resolve, sentences
from validation.profile.thresholds import HEALTH_PREFIXES, check_threshold, looser

# libyaml's parser where PyYAML was built with it (the same safe constructor, so the same
# values; a node whose PyYAML lacks it parses in pure Python): a profile is a dozen files
# and the pure-Python parser takes a quarter of a second over them, on every judgement
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_SAFE_LOADER)


PROFILE_DIR = Path(__file__).parent.parent / "profiles"


# Parsed profile files by (path, mtime, size). The controller loads a node's profile
# several times per run (planning, the live board, each judgement) and every node of a
# rack names the same few files: parsing them is most of a load (docs/scale.md).
_PARSED: dict[tuple[str, int, int], Any] = {}


def _read(name: str, directory: Path) -> dict[str, Any]:
    path = directory / f"{name}.yml"
    if not path.is_file():
        known = ", ".join(list_profiles(directory)) or "none"
        raise ProfileError(f"no profile {name!r} (known: {known})")
    data = copy.deepcopy(_parsed(path))  # a caller that edits its copy changes no other's
    if not isinstance(data, dict):
        raise ProfileError(f"{path.name}: must be a mapping")
    return data


def _parsed(path: Path) -> Any:
    """The file's YAML, parsed once per version of the file (an edit is read afresh)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        try:
            _PARSED[key] = _yaml(path.read_text())
        except yaml.YAMLError as exc:
            raise ProfileError(f"{path.name}: not valid YAML ({str(exc).splitlines()[0]})"
                               ) from None
    return _PARSED[key]


def list_profiles(directory: Path = PROFILE_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yml") if not p.stem.startswith("_"))


def deep_merge(base: Any, over: Any) -> Any:
    """`over` on top of `base`: mappings merge key by key (a nested key overridden, its
    siblings kept); anything else, a list included, replaces."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(base[k], v) if k in base else v
    return out


def _bases(data: dict[str, Any], where: str) -> list[str]:
    ext = data.get("extends")
    if ext is None:
        return []
    names = [ext] if isinstance(ext, str) else ext
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise err(where, "extends must be a profile name or a list of base names")
    variants = [n for n in names if not n.startswith("_")]
    if variants and len(names) > 1:
        raise err(where, f"a variant extends one profile ({variants[0]}), not a list")
    return names


def profile_layers(name: str, directory: Path, stack: tuple[str, ...] = ()
            ) -> list[tuple[str, dict[str, Any]]]:
    """The files a composed profile is made of, farthest base first, each once."""
    data = _read(name, directory)
    out: list[tuple[str, dict[str, Any]]] = []
    for base in _bases(data, f"{name}.yml"):
        if base in stack or base == name:
            chain = " -> ".join((*stack, name, base))
            raise err(f"{stack[0] if stack else name}.yml", f"extends cycle {chain}")
        if not (directory / f"{base}.yml").is_file():
            known = ", ".join(sorted(p.stem for p in directory.glob("*.yml"))) or "none"
            raise err(f"{name}.yml", f"extends unknown profile {base!r} (known: {known})")
        out += [la for la in profile_layers(base, directory, (*stack, name))
                if la[0] not in {n for n, _ in out}]
    return [*out, (name, data)]


def _raw_thresholds(data: dict[str, Any], directory: Path, where: str) -> list[Any]:
    """A file's thresholds as written: its includes' first, then its own."""
    raw: list[Any] = []
    for inc in data.get("include") or ():
        inc_path = directory / str(inc)
        if not inc_path.is_file():
            raise err(where, f"include {inc} not found")
        included = copy.deepcopy(_parsed(inc_path)) or []
        if isinstance(included, dict):  # {thresholds: [...], not_applicable: [...]}
            included = included.get("thresholds") or []
        if not isinstance(included, list):
            raise err(where, f"include {inc} must be a list of thresholds")
        raw += included
    return raw + (data.get("thresholds") or [])


def _raw_rules(data: dict[str, Any], directory: Path, where: str) -> list[NotApplicable]:
    """A file's not_applicable rules: its includes' (an included mapping's), then its own."""
    raw: list[Any] = []
    for inc in data.get("include") or ():
        included = _parsed(directory / str(inc))  # _raw_thresholds refused a missing one
        if isinstance(included, dict):
            raw += included.get("not_applicable") or []
    own = data.get("not_applicable") or []
    if not isinstance(own, list):
        raise err(where, "not_applicable must be a list of rules")
    return [check_not_applicable(r, where) for r in raw + own]


def _put(merged: dict[Any, Threshold], t: Threshold, inherited: bool, where: str,
         who: str = "variant") -> None:
    """t replaces the limit of its metric and labels in place (or is appended); an
    inherited health limit may be tightened, never loosened."""
    old = merged.get(threshold_key(t))
    if old and inherited and t.metric.startswith(HEALTH_PREFIXES) and looser(old, t):
        raise err(where, f"{t.metric}: a {who} may not loosen a health limit "
                          f"({old.op} {old.value} -> {t.op} {t.value})")
    merged[threshold_key(t)] = t


def _slot_key(raw: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = raw.get("labels") or {}
    return str(raw["slot"]), tuple(sorted((str(a), str(b)) for a, b in labels.items()))


def _merged_doc(layers: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """A profile's files merged, farthest base first (thresholds aside)."""
    doc: dict[str, Any] = {}
    for _, data in layers:
        doc = deep_merge(doc, {k: v for k, v in data.items()
                               if k not in ("extends", "include", "thresholds",
                                            "not_applicable")})
    return doc


def _layered_thresholds(layers: list[tuple[str, dict[str, Any]]], doc: dict[str, Any],
                        directory: Path) -> list[Threshold]:
    """The thresholds of a profile's files in order: a base's order first, a later file's
    limit replacing in place; a slot a base declares filled where it stands."""
    where = f"{layers[-1][0]}.yml"
    merged: dict[Any, Any] = {}  # key -> Threshold, or the base that left a slot
    origin: dict[Any, int] = {}
    named = sentences(doc, where)
    for n, (layer, data) in enumerate(layers):
        lwhere = f"{layer}.yml"
        for raw in _raw_thresholds(data, directory, lwhere):
            if isinstance(raw, dict) and "slot" in raw:
                if not layer.startswith("_"):
                    raise err(lwhere, f"slot {raw['slot']}: only a base (_*.yml) leaves a "
                                       "limit to its profiles")
                if set(raw) - {"slot", "labels"} or _slot_key(raw) in merged:
                    raise err(lwhere, f"slot {raw['slot']}: takes labels only, once")
                merged[_slot_key(raw)] = layer
                continue
            t = check_threshold(resolve(raw, named, where), lwhere)
            old = merged.get(threshold_key(t))
            inherited = isinstance(old, Threshold) and origin[threshold_key(t)] < n
            _put(merged, t, inherited, lwhere, "profile")
            origin[threshold_key(t)] = n
    for (metric, labels), t in merged.items():
        if not isinstance(t, Threshold):
            said = f"{metric} {dict(labels)}" if labels else metric
            raise err(where, f"{said} has no limit (a slot {t}.yml leaves to each profile)")
    return list(merged.values())


def load_profile(name_or_path: str, directory: Path = PROFILE_DIR) -> Profile:
    """Load a profile by name (or a path to a .yml) and check every threshold.

    A profile file holds only what differs from the bases it names in `extends:` (a name,
    or a list of them, merged in order), and a base may itself extend bases:

    - a base is a file named `_*.yml` (never listed, never loaded on its own). A chassis
      base (e.g. _xe9680.yml) extends _common.yml; a profile extends its chassis and, where
      one exists, a GPU overlay (`extends: [_xe9680, _gpu-h200]`).
      The files merge farthest base first: the inventory deep-merges (mappings key by
      key, a list or a scalar replaced), every other key is the last file's that says
      it; a file's `include:` (threshold lists) comes before its own thresholds.
    - a threshold is its metric and labels; a later file's threshold replaces the one of
      the same metric and labels in place, keeping the base's order; a new one comes
      after. A base may declare `- {slot: metric, labels: {...}}`: a limit each profile
      must set, in that position; a profile that leaves a slot empty is refused.
    - a provenance may name sentences written once (`{name}`, a file's `provenances:`)
      and `{provisional}`, the profile's `provisional:` sentence (why its floors are
      provisional), so one limit serves GPUs whose floors are provisional for their own
      reasons (validation.profile.provenance).
    - `extends: <profile>` (a listable profile, e.g. a `-lab` variant with `simulated:
      true`) inherits that profile's inventory whole and may not restate it.

    An inherited health limit (HEALTH_PREFIXES) may be tightened, never loosened. A cycle
    in `extends` or an unknown base is refused; anything malformed raises ProfileError
    with a one-line message.
    """
    p = Path(name_or_path)
    if p.suffix in (".yml", ".yaml"):
        if not p.is_file():
            raise ProfileError(f"no profile file {name_or_path}")
        directory, name = p.parent, p.stem
    else:
        name = name_or_path
    data = _read(name, directory)
    where = f"{name}.yml"
    bases = _bases(data, where)
    variant = bool(bases) and not bases[0].startswith("_")
    base_thresholds: list[Threshold] = []
    layers = [] if variant else profile_layers(name, directory)
    rules: list[NotApplicable] = []
    for layer, layer_data in layers or [(name, data)]:
        rules += _raw_rules(layer_data, directory, f"{layer}.yml")
    if variant:
        base = load_profile(bases[0], directory)
        rules = [*base.not_applicable, *rules]
        inv = base.inventory
        base_thresholds = list(base.thresholds)
        requires = set(data.get("requires", base.requires))
        fabric = data.get("fabric", base.fabric)
        nvls = data.get("nccl_nvls", base.nvls)
        if "inventory" in data:
            raise err(where, "a variant inherits the inventory; do not restate it")
    else:
        data = _merged_doc(layers)
        for key in ("inventory", "inventory_provenance", "requires"):
            if key not in data:
                raise err(where, f"missing {key}")
        inv = data["inventory"]
        requires = set(data["requires"])
        fabric = data.get("fabric", "ib")
        nvls = data.get("nccl_nvls", False)
        base_thresholds = inventory_thresholds(inv, str(data["inventory_provenance"]))
    from validation.checks.registry import NEEDS  # vocabulary of needs

    unknown = requires - set(NEEDS)
    if unknown:
        raise err(where, f"requires unknown needs {sorted(unknown)}")
    if fabric not in ("ib", "roce"):
        raise err(where, f"fabric must be ib or roce, not {fabric!r}")
    if not isinstance(nvls, bool):
        raise err(where, f"nccl_nvls must be true or false, not {nvls!r}")
    if variant:
        named = sentences(data, where)
        own = [check_threshold(resolve(t, named, where), where)
               for t in _raw_thresholds(data, directory, where)]
    else:
        own = _layered_thresholds(layers, data, directory)
    if not variant:
        check_inventory(inv, where)
    merged = {threshold_key(t): t for t in base_thresholds}
    simulated = bool(data.get("simulated", False))
    for t in own:
        _put(merged, t, variant, where)
    return Profile(name=name, description=str(data.get("description", "")),
                   simulated=simulated, requires=frozenset(requires), fabric=fabric,
                   inventory=inv, thresholds=tuple(merged.values()), nvls=nvls,
                   not_applicable=tuple(rules))
