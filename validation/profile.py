"""Hardware profiles: what the customer bought, and the limits it must meet.

A profile YAML (validation/profiles/<name>.yml) holds the expected inventory
and a list of thresholds. The inventory is turned into thresholds here
(provenance: the inventory's own), so the judge sees one uniform list. A profile
is written as what differs from its bases (`extends:`, files named `_*.yml`: a
common base, a chassis, then the GPU overlay), merged deeply (load_profile says
how). A `-lab` variant says `extends: <profile>` and `simulated: true`; it
inherits the inventory and may override thresholds, but never loosen a health
limit. Anything malformed raises ProfileError with a one-line message.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from validation import metrics
from validation.model import TIERS, Op, Threshold, Tier
from validation.workloads.common_env import nccl_ib_tc

# libyaml's parser where PyYAML was built with it (the same safe constructor, so the same
# values; a node whose PyYAML lacks it parses in pure Python): a profile is a dozen files
# and the pure-Python parser takes a quarter of a second over them, on every judgement
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_SAFE_LOADER)


PROFILE_DIR = Path(__file__).parent / "profiles"
OPS = (">=", "<=", "==", "!=", "in", "~", "ver>=")  # "~": string matches a regular expression
# "ver>=": firmware version at least (dotted numbers, validation.judge.version_key)

# limits a lab variant may tighten but never loosen: they guard health, not speed
HEALTH_PREFIXES = (
    "health.", "gpu.ecc_", "gpu.remapped_", "gpu.retired_", "gpu.xid_", "nvlink.replay",
    "nvlink.recovery", "nvlink.crc", "raid.degraded",
    # host health
    "nvswitch.sxid", "nvme.critical_warning", "nvme.media_errors", "nvme.percentage_used",
    "host.edac_", "host.mce_",
)


class ProfileError(ValueError):
    """A profile that cannot be trusted; the message is one line."""


@dataclass(frozen=True)
class NotApplicable:
    """A probe fact that makes limits not applicable on a node: where every measurement of
    `fact` equals `value`, a limit on one of `metrics` (with `labels`, where given) that
    no check measured reads not applicable, saying `reason`. Anything else not measured
    fails (validation.judge): silence is never a pass."""

    metrics: tuple[str, ...]
    fact: str
    value: Any
    reason: str
    labels: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"metrics": list(self.metrics), "fact": self.fact, "value": self.value,
                "reason": self.reason, "labels": self.labels}


def check_not_applicable(raw: Any, where: str) -> NotApplicable:
    if not isinstance(raw, dict) or set(raw) - {"metrics", "fact", "value", "reason",
                                                 "labels"}:
        raise _err(where, "a not_applicable rule is a mapping of metrics, fact, value, "
                          "reason (and labels)")
    names = raw.get("metrics")
    if not isinstance(names, list) or not names:
        raise _err(where, "a not_applicable rule needs a list of metrics")
    for name in [*names, raw.get("fact")]:
        if name not in metrics.METRICS:
            raise _err(where, f"not_applicable: unknown metric {name!r}")
    if metrics.METRICS[str(raw["fact"])].judged:
        raise _err(where, f"not_applicable: fact {raw['fact']} is a judged metric, not a "
                          "probe fact")
    if "value" not in raw or not str(raw.get("reason") or "").strip():
        raise _err(where, f"not_applicable rule on {raw['fact']} needs a value and a reason")
    labels = raw.get("labels")
    return NotApplicable(tuple(str(n) for n in names), str(raw["fact"]), raw["value"],
                         " ".join(str(raw["reason"]).split()),
                         {str(a): str(b) for a, b in labels.items()} if labels else None)


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    simulated: bool
    requires: frozenset[str]  # needs the node must have; a check needing them must pass
    fabric: str  # default fabric ("ib" | "roce") when the site file does not say
    inventory: dict[str, Any]
    thresholds: tuple[Threshold, ...]
    scope: dict[str, Any] = field(default_factory=dict)  # narrowing applied by scope()
    # NCCL NVLink SHARP (NVLS): on for NVSwitch platforms, the path customers train on;
    # a site's nccl_nvls_enable overrides it (hosts whose operators forbid multicast)
    nvls: bool = False
    # the site's provisional_limits: "strict" fails a below_expected verdict (acceptance
    # against the provisional floors themselves); the default fails only gross faults
    provisional_strict: bool = False
    # where the calibrated limits came from (the site's overlay), "" when none applied
    calibration: str = ""
    # the probe facts that make a limit not applicable on a node (NotApplicable)
    not_applicable: tuple[NotApplicable, ...] = ()

    def thresholds_for(self, metric: str) -> list[Threshold]:
        return [t for t in self.thresholds if t.metric == metric]

    def required_needs(self, site: dict[str, Any] | None = None) -> frozenset[str]:
        """The needs this node must satisfy: the profile's plus the site's fabric."""
        fabric = (site or {}).get("fabric", self.fabric)
        req = set(self.requires)
        if "rdma" in req and "rdma" not in self.scope.get("without", ()):
            req.add(fabric)
        return frozenset(req)

    def gpu(self, key: str, default: Any = None) -> Any:
        return self.inventory.get("gpu", {}).get(key, default)


def _err(where: str, msg: str) -> ProfileError:
    return ProfileError(f"{where}: {msg}")


def check_threshold(raw: dict[str, Any], where: str) -> Threshold:
    if not isinstance(raw, dict):
        raise _err(where, "threshold must be a mapping")
    for key in ("metric", "op", "value", "unit", "provenance"):
        if key not in raw:
            raise _err(where, f"threshold {raw.get('metric', '?')} has no {key}")
    extra = set(raw) - {"metric", "op", "value", "unit", "provenance", "outlier_k", "labels",
                        "tier", "gross"}
    if extra:
        raise _err(where, f"threshold {raw['metric']} has unknown keys {sorted(extra)}")
    name = raw["metric"]
    if name not in metrics.METRICS:
        raise _err(where, f"unknown metric {name!r}")
    metric = metrics.METRICS[name]
    if str(raw["unit"]) != metric.unit:
        raise _err(where, f"{name} is measured in {metric.unit or 'no unit'!r}, "
                          f"threshold says {raw['unit']!r}")
    if raw["op"] not in OPS:
        raise _err(where, f"{name}: op {raw['op']!r} not one of {' '.join(OPS)}")
    if not str(raw["provenance"]).strip():
        raise _err(where, f"{name}: empty provenance")
    k = raw.get("outlier_k")
    if k is not None and (not isinstance(k, (int, float)) or k <= 0):
        raise _err(where, f"{name}: outlier_k must be a positive number")
    if raw["op"] in (">=", "<=") and not isinstance(raw["value"], (int, float)):
        raise _err(where, f"{name}: {raw['op']} needs a number, got {raw['value']!r}")
    labels = raw.get("labels")
    tier = _tier(raw, where)
    return Threshold(metric=name, op=raw["op"], value=raw["value"], unit=str(raw["unit"]),
                     provenance=str(raw["provenance"]), outlier_k=k,
                     labels={str(a): str(b) for a, b in labels.items()} if labels else None,
                     tier=tier, gross=_gross(raw, tier, where))


def _tier(raw: dict[str, Any], where: str) -> Tier:
    """The threshold's tier: as stated, else 'provisional' when its provenance says so
    (its first word), else 'spec'. A stated tier never contradicts the provenance."""
    said_provisional = str(raw["provenance"]).lstrip().startswith("PROVISIONAL")
    tier = raw.get("tier", "provisional" if said_provisional else "spec")
    if tier not in TIERS:
        raise _err(where, f"{raw['metric']}: tier {tier!r} not one of {' '.join(TIERS)}")
    if said_provisional != (tier == "provisional"):
        raise _err(where, f"{raw['metric']}: tier {tier} but the provenance "
                          f"{'says' if said_provisional else 'does not say'} PROVISIONAL")
    return tier  # one of TIERS, checked above


def _gross(raw: dict[str, Any], tier: str, where: str) -> float | None:
    """The gross-fault line of a provisional >=/<= limit: on the far side of the limit."""
    gross = raw.get("gross")
    if gross is None:
        return None
    name, op, value = raw["metric"], raw["op"], raw["value"]
    if tier != "provisional" or op not in (">=", "<="):
        raise _err(where, f"{name}: gross belongs to a provisional >= or <= limit only")
    if not isinstance(gross, (int, float)) or isinstance(gross, bool):
        raise _err(where, f"{name}: gross must be a number, got {gross!r}")
    if (op == ">=" and gross > value) or (op == "<=" and gross < value):
        raise _err(where, f"{name}: gross {gross} is stricter than the limit {op} {value}")
    return float(gross)


def _t(metric: str, op: Op, value: Any, prov: str, labels: dict[str, str] | None = None
       ) -> Threshold:
    return Threshold(metric=metric, op=op, value=value, unit=metrics.get(metric).unit,
                     provenance=prov, labels=labels)


def expected_pair_links(inv: dict[str, Any]) -> dict[tuple[int, int], int]:
    """NVLinks expected between every GPU pair, from the inventory's topology."""
    count = int(inv.get("gpu", {}).get("count", 0))
    nvl = inv.get("nvlink") or {}
    if not nvl or count < 2:
        return {}
    per_pair = int(nvl["pair_links"])
    topo = nvl.get("topology", "all-to-all")
    if topo == "all-to-all":
        groups = [list(range(count))]
    elif topo in ("groups", "pairs"):
        size = 2 if topo == "pairs" else int(nvl.get("group_size", 4))
        groups = [list(range(i, min(i + size, count))) for i in range(0, count, size)]
    else:
        raise ProfileError(f"nvlink topology {topo!r} not one of all-to-all, groups, pairs")
    group_of = {g: n for n, grp in enumerate(groups) for g in grp}
    return {(a, b): per_pair if group_of[a] == group_of[b] else 0
            for a, b in itertools.combinations(range(count), 2)}


def inventory_thresholds(inv: dict[str, Any], prov: str) -> list[Threshold]:
    """The inventory's expectations as thresholds (equal-to, or at-least for links)."""
    out: list[Threshold] = []
    gpu = inv.get("gpu") or {}
    src = f"inventory ({prov})"
    simple = {"count": "gpu.count", "model": "gpu.model", "memory_mib": "gpu.memory_total",
              "cuda": "gpu.cuda_version", "nccl": "nccl.version",
              "power_limit_w": "gpu.power_limit"}
    for key, metric in simple.items():
        if key in gpu:
            out.append(_t(metric, "==", gpu[key], src))
    if "nccl" in gpu:  # PyTorch loads its own NCCL: judged against the same pin
        out.append(_t("nccl.torch_version", "==", gpu["nccl"], src))
    if "vbios" in gpu:
        out.append(_t("gpu.vbios", "~", gpu["vbios"], src))
    if "driver_branch" in gpu:
        out.append(_t("gpu.driver_version", "~", rf"^{re.escape(str(gpu['driver_branch']))}\.",
                      src))
    pcie = gpu.get("pcie") or {}
    if pcie:
        out.append(_t("gpu.pcie_gen", ">=", pcie["gen"], src))
        out.append(_t("gpu.pcie_width", ">=", pcie["width"], src))
    if "count" in gpu:  # what DCGM's host engine lists (the check runs where DCGM is required)
        out.append(_t("dcgm.gpu_count", "==", gpu["count"], src))
        # a chassis without NVSwitch expects DCGM to list none
        out.append(_t("dcgm.nvswitch_count", "==", int((inv.get("nvswitch") or {})
                                                        .get("count", 0)), src))
    if gpu:
        out += [
            _t("gpu.uniform", "==", True, src),
            _t("gpu.ecc_mode", "==", "Enabled", src),
            _t("gpu.persistence_mode", "==", "Enabled", src),
            _t("gpu.mig_mode", "==", "Disabled", src),
        ]
    nvl = inv.get("nvlink") or {}
    if nvl:
        out.append(_t("nvlink.links_up", ">=", nvl["links_per_gpu"], src))
        out.append(_t("nvlink.link_speed", ">=", nvl["link_speed_gbs"], src))
        for (a, b), n in expected_pair_links(inv).items():
            out.append(_t("nvlink.pair_links", "==", n, src, {"pair": f"{a}-{b}"}))
    nvs = inv.get("nvswitch") or {}
    if nvs:
        out.append(_t("nvswitch.count", "==", nvs["count"], src))
        out.append(_t("gpu.fabric_state", "==", "Completed", src))
        out.append(_t("fabricmanager.active", "==", True, src))
    nic = inv.get("nic") or {}
    if nic:
        out.append(_t("nic.count", "==", nic["count"], src))
        out.append(_t("nic.model", "~", nic["model"], src))
        out.append(_t("ib.port_state", "==", "Active", src))
        out.append(_t("ib.phys_state", "==", "LinkUp", src))
        out.append(_t("ib.rate", ">=", nic["rate_gbps"], src))
        out.append(_t("gpu.local_nics", ">=", 1, src))
        out += _placement_thresholds(inv, src)
        out.append(_t("kernel.module_loaded", "==", True, src, {"module": "nvidia_peermem"}))
        # GPUDirect RDMA through DOCA-OFED: peermem bound to the ib_core in use, and both the
        # files installed now (a peermem rebuilt after DOCA, DOCA's ib_core)
        gdr = "GPUDirect RDMA: nvidia-peermem registers with ib_core's peer-memory API"
        out.append(_t("peermem.ib_core_linked", "==", True, gdr, {"module": "nvidia_peermem"}))
        out.append(_t("kernel.module_current", "==", True, gdr + "; the module loaded is the "
                      "file installed (srcversion)"))
        if nic.get("pcie"):
            out.append(_t("nic.pcie_gen", ">=", nic["pcie"]["gen"], src))
            out.append(_t("nic.pcie_width", ">=", nic["pcie"]["width"], src))
    if "nvme" in inv:
        out.append(_t("nvme.count", "==", inv["nvme"]["count"], src))
    if "raid" in inv:
        out += [_t("raid.assembled", "==", True, src), _t("raid.mounted", "==", True, src),
                _t("raid.degraded", "<=", 0, src)]
    for token in inv.get("kernel_cmdline") or ():
        out.append(_t("kernel.cmdline_token", "==", True, src, {"token": str(token)}))
    if "kernel_cmdline" in inv:
        out.append(_t("kernel.nouveau_loaded", "==", False, src))
    return out


# nic.placement: where the order puts the compute NICs (the launch map, pcie.launch_map)
#   gpu-switch  one NIC behind each GPU's PCIe switch (XE9680: GPU and ConnectX-7 share a
#               switch; topo -m PIX/PXB); a GPU with none or a NIC on the wrong switch fails
#   numa        each GPU has a compute NIC on its own NUMA node (DL380a: fewer NICs, on
#               the CPU's root ports; topo -m PHB/NODE is enough)
# Absent: gpu-switch when the order has a NIC for every GPU, else numa.
PLACEMENTS = ("gpu-switch", "numa")


def nic_placement(inv: dict[str, Any]) -> str:
    nic = inv.get("nic") or {}
    gpus = int((inv.get("gpu") or {}).get("count", 0) or 0)
    placement = nic.get("placement") or (
        "gpu-switch" if gpus and int(nic.get("count", 0) or 0) >= gpus else "numa")
    if placement not in PLACEMENTS:
        raise ProfileError(f"inventory.nic.placement {placement!r} not one of "
                           f"{', '.join(PLACEMENTS)}")
    return str(placement)


def _placement_thresholds(inv: dict[str, Any], src: str) -> list[Threshold]:
    from validation.launch_map import NUMA_PATHS, SWITCH_PATHS

    if nic_placement(inv) == "numa":
        return [_t("launch.nic_path", "in", list(NUMA_PATHS), src)]
    per_gpu = max(1, int(inv["nic"].get("count", 0)) // max(1, int(inv["gpu"]["count"])))
    return [_t("launch.nic_path", "in", list(SWITCH_PATHS), src),
            _t("launch.switch_nics", "==", per_gpu, src)]


def _check_inventory(inv: Any, where: str) -> None:
    if not isinstance(inv, dict) or not isinstance(inv.get("gpu"), dict):
        raise _err(where, "inventory.gpu missing")
    for key in ("count", "model", "memory_mib"):
        if key not in inv["gpu"]:
            raise _err(where, f"inventory.gpu.{key} missing")
    peak = inv["gpu"].get("bf16_dense_tflops")
    if peak is not None and (not isinstance(peak, dict) or peak.get("unit") != "TFLOP/s"
                             or not str(peak.get("provenance", "")).strip()
                             or not isinstance(peak.get("value"), (int, float))):
        raise _err(where, "inventory.gpu.bf16_dense_tflops needs value, unit TFLOP/s, provenance")
    if inv.get("nvlink"):
        expected_pair_links(inv)  # raises on an unknown topology


# Largest IB MTU a RoCE port runs over an Ethernet MTU: Linux include/rdma/ib_addr.h
# iboe_get_mtu() subtracts 96 bytes of headers (GRH, UDP, BTH, XRC, AtomicETH, ICRC).
ROCE_HEADER_BYTES = 96
IB_MTUS = (4096, 2048, 1024, 512, 256)
# An InfiniBand port's MTU is the subnet manager's (no role sets it): 4096 on ConnectX/NDR.
IB_FABRIC_MTU = 4096


def roce_active_mtu(eth_mtu: int) -> int:
    """The RDMA active_mtu ibv_devinfo shows for a RoCE port on a netdev of this MTU."""
    room = int(eth_mtu) - ROCE_HEADER_BYTES
    return next((m for m in IB_MTUS if m <= room), 256)


def _provisioned(site: dict[str, Any], name: str) -> Any:
    """A role variable the controller derived from the inventory (inventory.PROVISIONED_VARS)."""
    if name not in site:
        raise ProfileError(f"site file lacks {name} (the controller derives it from the "
                           "inventory's role variables)")
    return site[name]


def _truthy(v: Any) -> bool:
    """A role variable's boolean as Ansible reads it (true, "yes", 1, ...)."""
    return v is True or str(v).strip().lower() in ("true", "yes", "on", "1")


def mlxconfig_wanted(site: dict[str, Any]) -> dict[str, int | str]:
    """The firmware settings the rdma_network role sets on the compute ConnectX ports, as
    its tasks/main.yml builds them: LINK_TYPE_P1 IB(1) or ETH(2) from the fabric, then the
    site's rdma_network_mlxconfig (name -> numeric value) over it."""
    extra = site.get("rdma_network_mlxconfig") or {}
    if not isinstance(extra, dict):
        raise ProfileError("site rdma_network_mlxconfig must be a mapping of mlxconfig "
                           "names to values")
    wanted: dict[str, int | str] = {"LINK_TYPE_P1": 1 if site.get("fabric") == "ib" else 2}
    for k, v in extra.items():
        text = str(v).strip()
        wanted[str(k)] = int(text) if re.fullmatch(r"-?\d+", text) else text
    return wanted


def site_thresholds(site: dict[str, Any], profile: Profile) -> list[Threshold]:
    """Limits that follow the variables that provisioned the node (fabric, RoCE QoS and
    MTU, pinned versions), under the roles' own names; none are restated here."""
    out: list[Threshold] = []
    src = "inventory variable {} (the value that provisioned this node)"
    if "nvidia_driver_branch" in site:
        branch = str(site["nvidia_driver_branch"])
        out.append(_t("gpu.driver_version", "~", rf"^{re.escape(branch)}\.",
                      src.format("nvidia_driver_branch")))
    # GPU modes as the driver role set them (ECC, MIG, persistence)
    for var, metric, on, off in (
            ("nvidia_driver_ecc_enabled", "gpu.ecc_mode", "Enabled", "Disabled"),
            ("nvidia_driver_mig_enabled", "gpu.mig_mode", "Enabled", "Disabled"),
            ("nvidia_driver_persistence_enabled", "gpu.persistence_mode", "Enabled",
             "Disabled")):
        if var in site:
            out.append(_t(metric, "==", on if _truthy(site[var]) else off, src.format(var)))
    if "cuda_toolkit_version" in site:
        out.append(_t("gpu.cuda_version", "==", str(site["cuda_toolkit_version"]),
                      src.format("cuda_toolkit_version")))
    if "nccl_version" in site:
        upstream = str(site["nccl_version"]).split("-")[0]  # 2.28.9-1 -> 2.28.9
        # the role installed the system libnccl at this pin too: judged where provisioned
        for metric in ("nccl.version", "nccl.torch_version", "nccl.system_version"):
            out.append(_t(metric, "==", upstream, src.format("nccl_version")))
    if "validation_tools_nccl_tests_version" in site:
        out.append(_t("nccl_tests.version", "==",
                      str(site["validation_tools_nccl_tests_version"]),
                      src.format("validation_tools_nccl_tests_version")))
    if "rdma" not in profile.requires:
        return out
    fabric = site.get("fabric", profile.fabric)
    fsrc = "site fabric (inventory rackready_fabric)" if "fabric" in site else \
        f"profile default fabric {fabric}"
    out.append(_t("ib.link_layer", "==", "InfiniBand" if fabric == "ib" else "Ethernet", fsrc))
    if fabric == "ib":
        out.append(_t("ib.active_mtu", "==", IB_FABRIC_MTU,
                      "InfiniBand subnet manager MTU 4096 (ConnectX-7 max_mtu; no role sets it)"))
        return out
    mtu = int(_provisioned(site, "rdma_network_roce_mtu"))
    prio = str(_provisioned(site, "rdma_network_roce_priority"))
    out += [
        _t("ib.active_mtu", "==", roce_active_mtu(mtu),
           src.format(f"rdma_network_roce_mtu={mtu}") + ", less 96 header bytes "
           "(Linux iboe_get_mtu)"),
        _t("roce.trust", "==", str(_provisioned(site, "rdma_network_roce_trust")),
           src.format("rdma_network_roce_trust")),
        _t("roce.pfc_priority_enabled", "==", True, src.format("rdma_network_roce_priority"),
           {"priority": prio}),
        _t("roce.pfc_other_priorities", "<=", 0, src.format("rdma_network_roce_priority")),
    ]
    # ECN on the lossless priority, both ends of DCQCN (the role writes the sysfs enables)
    ecn = _truthy(_provisioned(site, "rdma_network_roce_ecn"))
    for metric, point in (("roce.ecn_np_enabled", "roce_np"), ("roce.ecn_rp_enabled", "roce_rp")):
        out.append(_t(metric, "==", ecn, src.format("rdma_network_roce_ecn") +
                      f" on rdma_network_roce_priority={prio} (ecn/{point}/enable/{prio})",
                      {"priority": prio}))
    dscp = int(_provisioned(site, "rdma_network_roce_dscp"))
    try:
        nccl_ib_tc(dscp)  # refuses a DSCP out of range here, before any check runs
    except ValueError as e:
        raise ProfileError(str(e)) from None
    if str(site["rdma_network_roce_trust"]) == "dscp":
        out.append(_t("roce.dscp_priority", "==", int(prio),
                      src.format(f"rdma_network_roce_dscp={dscp}") + " mapped to "
                      f"rdma_network_roce_priority={prio} (mlnx_qos --dscp2prio)",
                      {"dscp": str(dscp)}))
    # the firmware settings the role's firmware task sets, in effect (after the reboot)
    _provisioned(site, "rdma_network_mlxconfig")
    for param, value in mlxconfig_wanted(site).items():
        why = ("inventory rackready_fabric (the role sets LINK_TYPE_P1 ETH(2) on RoCE)"
               if param == "LINK_TYPE_P1" and param not in (site["rdma_network_mlxconfig"] or {})
               else src.format(f"rdma_network_mlxconfig.{param}"))
        out.append(_t("nic.mlxconfig", "==", value, why, {"param": param}))
    out.append(_t("nic.mlxconfig_pending", "<=", 0,
                  "the role's firmware settings take effect at a reboot: one still pending "
                  "means the node runs other values than it was provisioned with"))
    return out


def with_site(profile: Profile, site: dict[str, Any]) -> Profile:
    """The profile as this node sees it: the site's fabric and its site-dependent limits."""
    fabric = site.get("fabric", profile.fabric)
    if fabric not in ("ib", "roce"):
        raise ProfileError(f"site fabric must be ib or roce, not {fabric!r}")
    strictness = site.get("provisional_limits", "gross")
    if strictness not in ("gross", "strict"):
        raise ProfileError(f"site provisional_limits must be gross or strict, not {strictness!r}")
    merged = {_key(t): t for t in profile.thresholds}
    calibration = ""
    if site.get("calibration"):
        calibrated, calibration = calibration_thresholds(site["calibration"], profile)
        merged.update((_key(t), t) for t in calibrated)
    for t in site_thresholds(site, profile):
        merged[_key(t)] = t  # the provisioned value wins over a profile's bench-run default
    return replace(profile, fabric=fabric, thresholds=tuple(merged.values()),
                   provisional_strict=strictness == "strict", calibration=calibration)


def calibration_thresholds(overlay: Any, profile: Profile) -> tuple[list[Threshold], str]:
    """A site's calibrated limits (invoke calibrate writes them) for this profile.

    Each replaces the profile's limit of the same metric and labels, never looser than
    that limit's gross-fault line (a calibration cannot absorb a gross fault); the overlay
    must be for this very profile. Returns the limits and where they came from."""
    where = "calibration overlay"
    if not isinstance(overlay, dict) or not isinstance(overlay.get("thresholds"), list):
        raise ProfileError(f"{where}: must be a mapping with a thresholds list")
    if overlay.get("profile") != profile.name.removesuffix("-lab") and \
            overlay.get("profile") != profile.name:
        raise ProfileError(f"{where}: is for profile {overlay.get('profile')!r}, "
                           f"not {profile.name!r}")
    base = {_key(t): t for t in profile.thresholds}
    out = []
    for raw in overlay["thresholds"]:
        t = check_threshold({**raw, "tier": "calibrated"} if isinstance(raw, dict) else raw,
                            where)
        floor = base.get(_key(t))
        if floor is None:
            raise ProfileError(f"{where}: {t.metric} {t.labels or ''} has no limit in "
                               f"{profile.name} to calibrate")
        line = floor.gross if floor.gross is not None else floor.value
        if t.op != floor.op or not isinstance(line, (int, float)) or (
                t.op == ">=" and t.value < line) or (t.op == "<=" and t.value > line):
            raise ProfileError(f"{where}: {t.metric} {t.op} {t.value} is looser than the "
                               f"profile's gross-fault line {floor.op} {line}")
        out.append(t)
    return out, str(overlay.get("source") or where)


def _key(t: Threshold) -> tuple[str, tuple[tuple[str, str], ...]]:
    return t.metric, tuple(sorted((t.labels or {}).items()))


def _looser(base: Threshold, new: Threshold) -> bool:
    if base.op != new.op:
        return True
    if base.op == "<=":
        return float(new.value) > float(base.value)
    if base.op == ">=":
        return float(new.value) < float(base.value)
    return new.value != base.value


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
        raise _err(where, "extends must be a profile name or a list of base names")
    variants = [n for n in names if not n.startswith("_")]
    if variants and len(names) > 1:
        raise _err(where, f"a variant extends one profile ({variants[0]}), not a list")
    return names


def _layers(name: str, directory: Path, stack: tuple[str, ...] = ()
            ) -> list[tuple[str, dict[str, Any]]]:
    """The files a composed profile is made of, farthest base first, each once."""
    data = _read(name, directory)
    out: list[tuple[str, dict[str, Any]]] = []
    for base in _bases(data, f"{name}.yml"):
        if base in stack or base == name:
            chain = " -> ".join((*stack, name, base))
            raise _err(f"{stack[0] if stack else name}.yml", f"extends cycle {chain}")
        if not (directory / f"{base}.yml").is_file():
            known = ", ".join(sorted(p.stem for p in directory.glob("*.yml"))) or "none"
            raise _err(f"{name}.yml", f"extends unknown profile {base!r} (known: {known})")
        out += [la for la in _layers(base, directory, (*stack, name))
                if la[0] not in {n for n, _ in out}]
    return [*out, (name, data)]


def _raw_thresholds(data: dict[str, Any], directory: Path, where: str) -> list[Any]:
    """A file's thresholds as written: its includes' first, then its own."""
    raw: list[Any] = []
    for inc in data.get("include") or ():
        inc_path = directory / str(inc)
        if not inc_path.is_file():
            raise _err(where, f"include {inc} not found")
        included = copy.deepcopy(_parsed(inc_path)) or []
        if isinstance(included, dict):  # {thresholds: [...], not_applicable: [...]}
            included = included.get("thresholds") or []
        if not isinstance(included, list):
            raise _err(where, f"include {inc} must be a list of thresholds")
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
        raise _err(where, "not_applicable must be a list of rules")
    return [check_not_applicable(r, where) for r in raw + own]


PROVISIONAL_MARK = "{provisional}"


def _provenance(raw: Any, doc: dict[str, Any], where: str) -> Any:
    """A base's threshold whose provenance starts with {provisional}: the profile's own
    `provisional` sentence (why its floors are provisional) put in its place."""
    if not isinstance(raw, dict) or not str(raw.get("provenance", "")).startswith(
            PROVISIONAL_MARK):
        return raw
    note = doc.get("provisional")
    if not isinstance(note, str) or not note.startswith("PROVISIONAL"):
        raise _err(where, f"{raw.get('metric', '?')}: provenance starts with "
                          f"{PROVISIONAL_MARK}, so the profile needs `provisional:`, a "
                          "sentence that starts with PROVISIONAL")
    return {**raw, "provenance": note + str(raw["provenance"])[len(PROVISIONAL_MARK):]}


def _put(merged: dict[Any, Threshold], t: Threshold, inherited: bool, where: str,
         who: str = "variant") -> None:
    """t replaces the limit of its metric and labels in place (or is appended); an
    inherited health limit may be tightened, never loosened."""
    old = merged.get(_key(t))
    if old and inherited and t.metric.startswith(HEALTH_PREFIXES) and _looser(old, t):
        raise _err(where, f"{t.metric}: a {who} may not loosen a health limit "
                          f"({old.op} {old.value} -> {t.op} {t.value})")
    merged[_key(t)] = t


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
    for n, (layer, data) in enumerate(layers):
        lwhere = f"{layer}.yml"
        for raw in _raw_thresholds(data, directory, lwhere):
            if isinstance(raw, dict) and "slot" in raw:
                if not layer.startswith("_"):
                    raise _err(lwhere, f"slot {raw['slot']}: only a base (_*.yml) leaves a "
                                       "limit to its profiles")
                if set(raw) - {"slot", "labels"} or _slot_key(raw) in merged:
                    raise _err(lwhere, f"slot {raw['slot']}: takes labels only, once")
                merged[_slot_key(raw)] = layer
                continue
            t = check_threshold(_provenance(raw, doc, where), lwhere)
            old = merged.get(_key(t))
            inherited = isinstance(old, Threshold) and origin[_key(t)] < n
            _put(merged, t, inherited, lwhere, "profile")
            origin[_key(t)] = n
    for (metric, labels), t in merged.items():
        if not isinstance(t, Threshold):
            said = f"{metric} {dict(labels)}" if labels else metric
            raise _err(where, f"{said} has no limit (a slot {t}.yml leaves to each profile)")
    return list(merged.values())


def load_profile(name_or_path: str, directory: Path = PROFILE_DIR) -> Profile:
    """Load a profile by name (or a path to a .yml) and check every threshold.

    A profile file holds only what differs from the bases it names in `extends:` (a name,
    or a list of them, merged in order), and a base may itself extend bases:

    - a base is a file named `_*.yml` (never listed, never loaded on its own). A chassis
      base (e.g. _xe9680.yml) extends _common.yml and a GPU overlay extends its chassis.
      The files merge farthest base first: the inventory deep-merges (mappings key by
      key, a list or a scalar replaced), every other key is the last file's that says
      it; a file's `include:` (threshold lists) comes before its own thresholds.
    - a threshold is its metric and labels; a later file's threshold replaces the one of
      the same metric and labels in place, keeping the base's order; a new one comes
      after. A base may declare `- {slot: metric, labels: {...}}`: a limit each profile
      must set, in that position; a profile that leaves a slot empty is refused.
    - a base's provenance may start with `{provisional}`: the profile's `provisional:`
      sentence (why its floors are provisional, "PROVISIONAL until measured on ...")
      stands there, so one limit serves GPUs whose floors are provisional for their own
      reasons.
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
    layers = [] if variant else _layers(name, directory)
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
            raise _err(where, "a variant inherits the inventory; do not restate it")
    else:
        data = _merged_doc(layers)
        for key in ("inventory", "inventory_provenance", "requires"):
            if key not in data:
                raise _err(where, f"missing {key}")
        inv = data["inventory"]
        requires = set(data["requires"])
        fabric = data.get("fabric", "ib")
        nvls = data.get("nccl_nvls", False)
        base_thresholds = inventory_thresholds(inv, str(data["inventory_provenance"]))
    from validation.checks.registry import NEEDS  # vocabulary of needs

    unknown = requires - set(NEEDS)
    if unknown:
        raise _err(where, f"requires unknown needs {sorted(unknown)}")
    if fabric not in ("ib", "roce"):
        raise _err(where, f"fabric must be ib or roce, not {fabric!r}")
    if not isinstance(nvls, bool):
        raise _err(where, f"nccl_nvls must be true or false, not {nvls!r}")
    own = [check_threshold(_provenance(t, data, where), where)
           for t in _raw_thresholds(data, directory, where)] if variant \
        else _layered_thresholds(layers, data, directory)
    if not variant:
        _check_inventory(inv, where)
    merged = {_key(t): t for t in base_thresholds}
    simulated = bool(data.get("simulated", False))
    for t in own:
        _put(merged, t, variant, where)
    return Profile(name=name, description=str(data.get("description", "")),
                   simulated=simulated, requires=frozenset(requires), fabric=fabric,
                   inventory=inv, thresholds=tuple(merged.values()), nvls=nvls,
                   not_applicable=tuple(rules))


def scope(profile: Profile, gpus: int | None = None, without: tuple[str, ...] = ()) -> Profile:
    """Narrow a profile to a partial machine (a 2-GPU VM slice of an HGX board).

    The narrowing is recorded in profile.scope and the result, so a scoped pass
    can never be mistaken for a full-machine pass.
    """
    unknown = set(without) - set(__import__("validation.checks.registry",
                                            fromlist=["NEEDS"]).NEEDS)
    if unknown:
        raise ProfileError(f"--without: unknown needs {sorted(unknown)}")
    inv = profile.inventory
    thresholds = list(profile.thresholds)
    if gpus is not None:
        if gpus < 1 or gpus > int(inv.get("gpu", {}).get("count", 0)):
            raise ProfileError(f"--gpus {gpus}: profile has {inv.get('gpu', {}).get('count')}")
        inv = {**inv, "gpu": {**inv["gpu"], "count": gpus}}
        pairs = {f"{a}-{b}" for a, b in itertools.combinations(range(gpus), 2)}
        thresholds = [
            replace(t, value=gpus) if t.metric in ("gpu.count", "dcgm.gpu_count")
            else t for t in thresholds
            if t.metric != "nvlink.pair_links" or (t.labels or {}).get("pair") in pairs
        ]
    requires = profile.requires - set(without)
    if gpus is not None and gpus < int(profile.inventory.get("gpu", {}).get("count", 0)):
        requires -= {"bare-metal"}  # a GPU slice is a VM, not the chassis
    if gpus == 1:
        # one GPU has no peer: no collectives and no NVLink to judge (a passed-through GPU
        # lists no links); a full machine keeps both required, so a GPU with none up fails
        requires -= {"multi-gpu", "nvlink"}
    return replace(profile, inventory=inv, thresholds=tuple(thresholds),
                   requires=frozenset(requires),
                   scope={"gpus": gpus, "without": sorted(without)})
