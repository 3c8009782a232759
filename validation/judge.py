"""The judge: measurements + profile -> verdicts. Pure; runs on the node and the controller.

Rules, in the order they apply:
- a check that did not end "ok" fails when the profile requires what it needs
  (skipped, crashed, timed out: never a pass); otherwise it is not applicable;
- repeats of one metric with the same labels are judged on their median, and
  the spread is reported;
- every threshold whose labels match a measurement is applied; a judged metric
  without any threshold fails (a limit nobody wrote is not a pass);
- thresholds with outlier_k also compare each GPU (or node) with its peers:
  more than k robust deviations on the bad side fails even above the floor;
- a threshold that matched no measurement is judged from why (_unmeasured): not
  applicable where its check is not part of the run, where the profile does not require
  what the check (or the metric) needs, where a probe fact the profile names says so
  (the GPU retires memory by row remapping), or where a label the level chooses (size,
  model shape, dtype) took other values; otherwise it fails as "not measured", naming
  the check (a check that ran "ok" and emitted nothing is never a pass).
"""

from __future__ import annotations

import functools
import re
import statistics
from collections import defaultdict
from typing import Any

from validation import metrics
from validation.model import CheckResult, Measurement, Outcome, Threshold, Value, Verdict

LabelKey = tuple[tuple[str, str], ...]
# labels that name the entity compared in fleet outliers, not the kind of value
ENTITY_LABELS = ("gpu", "serial", "bus_id", "node")
MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution -> standard deviation
# labels whose values depend on the level or the device, not on the hardware being whole:
# a collective size the level's sweep skips, a model shape, a dtype the GPU lacks.
# A threshold labelled with one of them that matched nothing is not applicable.
LEVEL_LABELS = frozenset({"size_bytes", "shape", "dtype"})


def fleet_outliers(values_by_entity: dict[str, float], k: float,
                   better: str = "higher") -> set[str]:
    """Entities more than k robust deviations (median/MAD) on the bad side of their peers.

    With fewer than 3 entities there is no majority to compare with: none is an outlier.
    A MAD of zero (most peers identical) uses 1% of the median as the scale, so
    one GPU far below seven identical ones is still caught.
    """
    if len(values_by_entity) < 3:
        return set()
    vals = list(values_by_entity.values())
    med = statistics.median(vals)
    mad = statistics.median(abs(v - med) for v in vals) * MAD_TO_SIGMA
    scale = mad if mad > 0 else abs(med) * 0.01
    if scale == 0:
        return set()
    out = set()
    for name, v in values_by_entity.items():
        z = (v - med) / scale
        bad = -z if better == "higher" else z if better == "lower" else abs(z)
        if bad > k:
            out.add(name)
    return out


def component(labels: dict[str, str]) -> str:
    """The part a technician acts on, in words."""
    key = tuple(sorted(labels.items()))
    try:
        return _component(key)
    except TypeError:  # a label value that cannot be hashed (an unusual result): uncached
        return _component.__wrapped__(key)


@functools.lru_cache(maxsize=8192)  # a node's verdicts name the same few hundred parts
def _component(key: LabelKey) -> str:
    labels = dict(key)
    parts = []
    if "gpu" in labels:
        gpu = f"GPU {labels['gpu']}"
        extra = [f"serial {labels['serial']}" for _ in [0] if labels.get("serial")]
        if labels.get("bus_id"):
            extra.append(f"PCI {labels['bus_id']}")
        parts.append(gpu + (f" ({', '.join(extra)})" if extra else ""))
    if labels.get("xids"):  # the XIDs one verdict counts, and a site's reclassification
        parts.append(f"XID {labels['xids'].replace(',', ', ')}"
                     + (f" (site override {labels['override']})" if labels.get("override")
                        else ""))
    if "pair" in labels:
        parts.append(f"NVLink between GPUs {labels['pair'].replace('-', ' and ')}")
    if "link" in labels:
        parts.append(f"NVLink {labels['link']}")
    if "nic" in labels:
        parts.append(f"NIC {labels['nic']}" + (f" port {labels['port']}" if "port" in labels
                                               else "")
                     + (f" (PCI {labels['bus_id']})" if "bus_id" in labels
                        and "gpu" not in labels else ""))
    elif "port" in labels and "physical_id" not in labels and "nvswitch" not in labels:
        parts.append(f"IB port {labels['port']}")
    if "component" in labels:  # BMC firmware inventory
        parts.append(f"{labels['component']} firmware"
                     + (f" ({labels['item']})" if labels.get("item") else ""))
    # NVSwitch, NVMe drive by serial, DIMM slot, machine-check site, NUMA
    if "nvswitch" in labels or "physical_id" in labels:
        # the driver's number where known; Fabric Manager names a switch by its physical id
        extra = [f"PCI {labels['bus_id']}" for _ in [0] if labels.get("bus_id")]
        if labels.get("physical_id"):
            extra.append(f"physical id {labels['physical_id']}")
        parts.append(f"NVSwitch {labels.get('nvswitch', '')}".rstrip()
                     + (f" ({', '.join(extra)})" if extra else "")
                     + (f" port {labels['port']}" if "port" in labels else ""))
    if "drive" in labels:
        parts.append(f"NVMe drive {labels['drive']} (serial {labels.get('serial', 'unknown')})")
    if "dimm" in labels:
        parts.append(f"DIMM slot {labels['dimm']}"
                     + (f" (serial {labels['serial']})" if labels.get("serial") else "")
                     + (f" (EDAC {labels['edac']})" if labels.get("edac") else ""))
    if "empty_slots" in labels:
        parts.append(f"empty DIMM slots {labels['empty_slots']}")
    if "mce_at" in labels:
        parts.append(f"hardware error at {labels['mce_at']}")
    if "numa" in labels:
        parts.append(f"NUMA node {labels['numa']}")
    if "hop" in labels:  # one PCIe link of a device's path (pcie.path)
        parts.append(f"PCIe link {labels['hop']}"
                     + (f" ({labels['trained']})" if labels.get("trained") else "")
                     + (f", behind it {labels['behind']}" if labels.get("behind") else ""))
    for name, what in (("netdev", "interface"), ("device", "drive"), ("bridge", "PCIe bridge"),
                       ("array", "md array"), ("token", "kernel parameter"),
                       ("module", "module"), ("priority", "priority"), ("dscp", "DSCP"),
                       ("param", "firmware setting"),
                       # out of band (BMC)
                       ("psu", "power supply"), ("fan", "fan"), ("sensor", "sensor"),
                       ("bios", "BIOS setting"),
                       ("log", "BMC log"), ("entry", "entry"),
                       ("cable", "cable"), ("node", "node"),
                       ("health_incident", "DCGM health incident")):
        if name in labels and not (name == "node" and "gpu" in labels):
            parts.append(f"{what} {labels[name]}")
    return ", ".join(parts) or "node"


_REMEDIATION: list[tuple[str, str]] = [
    # first: "xid" below would catch nvswitch.sxid_*
    (r"^nvswitch\.sxid|^health\.delta\.sxid",
     "look up the SXid in the Fabric Manager user guide; reset the baseboard (power-cycle "
     "the node) and re-run; if it recurs, replace the HGX baseboard holding {c} (vendor "
     "service)"),
    (r"^dcgm\.health_", "DCGM's health watches report an incident on {c}: PCIe, memory, "
                       "NVLink or InfoROM: reseat the part and re-run, RMA by serial if it "
                       "recurs; thermal or power: check cooling, fans and PSUs"),
    (r"^dcgm\.(gpu_seen|gpu_count|nvswitch_count)$",
     "DCGM's host engine does not see what the driver lists ({c}): restart nvidia-dcgm and "
     "read nv-hostengine.log (a GPU excluded or detached, the NvSwitch module denylisted); "
     "if it stays unseen, reset the GPU (reboot the node) and re-run"),
    (r"^nvme\.(critical_warning|media_errors|percentage_used)$",
     "replace {c}: the drive reports failing media, a critical warning or worn-out endurance"),
    (r"^nvme\.temperature$", "check airflow and the drive bay fans for {c}"),
    (r"^host\.dimm_count$", "a DIMM is missing or not detected: reseat or fit a DIMM in {c} "
                            "(BIOS/BMC memory inventory), then re-run"),
    (r"^host\.dimm_size_gib$", "wrong DIMM fitted: compare {c} with the order and replace it"),
    (r"^host\.memory_total_gib$", "host memory differs from the order: see the DIMM count "
                                  "and sizes (a DIMM missing or of the wrong size) on {c}"),
    (r"^host\.dimm_speed_mts$", "{c} runs below the profile's speed: check the BIOS memory "
                                "frequency setting and that every DIMM is the ordered part"),
    (r"^host\.edac_|^health\.delta\.edac_",
     "replace {c} (memory errors); where the name is not a slot (an EDAC label), the "
     "BMC's hardware log (SEL / Lifecycle / IML) names it"),
    (r"^host\.mce_|^health\.delta\.mce_",
     "{c}: find the failing DIMM or CPU in the BMC's hardware log (SEL / Lifecycle / IML) "
     "and the EDAC verdicts, then replace it"),
    (r"^host\.membw", "memory bandwidth low on {c}: check every channel has its DIMMs, the "
                      "BIOS memory settings (speed, SNC, power profile) and background load"),
    # fabric/PCIe health: first, so they win over the broader patterns below
    (r"aer_", "PCIe AER errors on {c}: reseat it and its riser/retimer cable, check the "
              "slot's BIOS link settings; RMA the part by serial if errors continue"),
    (r"^health\.delta\.ib_link_", "the link flapped on {c}: reseat or replace the cable and "
                                   "transceiver, check the switch port's counters and log"),
    (r"^transceiver\.", "transceiver/cable on {c}: reseat it and check airflow (temperature); "
                        "clean or replace the fiber (rx power); replace the cable (BER)"),
    (r"^rdma\.gpudirect", "slow GPUDirect rail {c}: check the NIC's PCIe link (pcie.nic_link), "
                          "nvidia_peermem and the GPU/NIC placement; reseat the NIC and cable"),
    (r"^gpu\.idle_", "{c} idles hotter or at more power than its peers: check its heat sink, "
                     "airflow and fans; RMA by serial if it stays an outlier"),
    (r"^gemm\.load_", "clocks not held under load on {c}: check cooling, fans, PSUs and BMC "
                      "power capping"),
    (r"^gpu\.count$", "a GPU is missing: find its bus id in dmesg, reseat it (or the baseboard "
                      "cable) and check its power; RMA if it stays missing"),
    (r"^gpu\.(model|memory_total)$", "wrong part installed: compare with the order and "
                                     "replace {c}"),
    (r"^gpu\.vbios$", "update the VBIOS of {c} with the vendor firmware bundle"),
    (r"^gpu\.uniform$", "GPUs differ in model, VBIOS or memory: bring every GPU to one "
                        "firmware level"),
    (r"^gpu\.(driver|cuda)_version$|^nccl\.version$",
     "re-run provisioning (driver/CUDA/NCCL roles) to install the pinned versions"),
    (r"^gpu\.power_limit$", "reset the power limit of {c} (nvidia-smi -pl) and check BMC power "
                            "capping"),
    (r"^gpu\.(persistence_mode|mig_mode|ecc_mode)$",
     "re-run the driver role (persistence on, MIG off, ECC on) and reboot; {c}"),
    (r"_pending$", "reset {c} (reboot the node) to apply the pending remap, then re-run; RMA "
                   "by serial if it recurs"),
    (r"^gpu\.(ecc_|remapped_rows|retired_)|^health\.delta\.(ecc|remapped)",
     "RMA {c} by serial (memory errors)"),
    (r"^gpu\.xid_other$",
     "application-class XIDs repeated on {c}: restart the application and re-run; if they "
     "recur on this GPU alone, follow the catalog's investigatory action for them "
     "(CONTACT_SUPPORT: RMA by serial)"),
    (r"xid", "XIDs during the run on {c}: the gpu.xid verdicts name each XID's class and "
             "action (NVIDIA's XID catalog)"),
    (r"^gpu\.throttle\.|^gpu\.temperature$",
     "check cooling, fans, PSUs and BMC power capping for {c}"),
    (r"^pcie\.path_", "{c}: reseat what carries that link (the riser or cable between the "
                      "CPU and the PCIe switch for a switch uplink, else the card in its slot), "
                      "check the root port's BIOS link speed and width settings and re-run; "
                      "replace the riser, cable or switch board (vendor service) if it stays "
                      "degraded: every device behind it is slowed"),
    (r"^gpu\.pcie_|pcie_replay", "reseat {c} and its riser/cable; check the slot's BIOS link "
                                 "settings; RMA if the link stays degraded"),
    (r"^nic\.pcie_|^nic\.(count|model)$", "reseat {c}; check it is the ordered ConnectX model "
                                         "in a Gen5 x16 slot"),
    (r"^gpu\.local_nics$", "move a NIC to the NUMA node of {c} (riser/slot plan)"),
    (r"^launch\.", "the GPU and NIC of {c} are not wired as the profile orders: check the "
                    "riser and slot plan against the chassis' wiring guide (a NIC on another "
                    "GPU's PCIe switch feeds the wrong GPU), then re-run"),
    (r"^pcie\.acs", "disable ACS redirect on {c} (BIOS or setpci at boot)"),
    (r"^nvlink\.|^health\.delta\.nvlink", "reseat {c} (baseboard/NVLink bridge), re-run; RMA "
                                           "the GPU by serial if links stay down or errors rise"),
    (r"^gpu\.fabric_state$|^fabricmanager\.|^nvswitch\.",
     "restart nvidia-fabricmanager (systemctl restart nvidia-fabricmanager), check "
     "/var/log/fabricmanager.log; {c}"),
    (r"^ib\.|^health\.delta\.ib", "check cable and transceiver on {c} and the switch port"),
    (r"^roce\.ecn_", "ECN is off on {c}: re-run the rdma_network role (its "
                    "rackready-roce-qos.service writes the ecn/roce_np and roce_rp enables)"),
    (r"^roce\.dscp_priority$", "the DSCP->priority map drifted on {c}: re-run the rdma_network "
                              "role (mlnx_qos --dscp2prio set,<dscp>,<priority>)"),
    (r"^roce\.", "re-run the RoCE role (mlnx_qos trust and PFC) on {c}"),
    (r"^nic\.mlxconfig", "a ConnectX firmware setting differs on {c}: re-run the rdma_network "
                         "role (mlxconfig set) and reboot the node for it to take effect"),
    (r"^peermem\.|^kernel\.module_current$",
     "nvidia-peermem is not bound to the ib_core in use ({c}): rebuild the NVIDIA DKMS modules "
     "after DOCA-OFED (dkms install --force) and reload nvidia-peermem (re-run the "
     "rdma_network role, whose handler does both)"),
    (r"^kernel\.module_loaded$", "load {c} (modprobe) and enable it at boot"),
    (r"^nvme\.", "reseat NVMe drives / check the backplane; {c}"),
    (r"^raid\.", "re-run the RAID role (mdadm --assemble, mount /raid); replace a failed "
                 "member of {c}"),
    (r"^kernel\.cmdline", "re-run the kernel role to set {c} and reboot"),
    (r"^kernel\.nouveau", "blacklist nouveau, rebuild the initramfs and reboot"),
    # out of band (BMC)
    (r"^bmc\.firmware\.", "update {c} with the vendor's firmware bundle to at least the "
                           "profile's minimum"),
    (r"^bmc\.psu\.", "reseat or replace {c}; check its feed (PDU, cable) so every PSU is "
                      "powered and redundancy is restored"),
    (r"^bmc\.fan\.", "replace {c} (hot-swap) and re-run"),
    (r"^bmc\.bios\.", "re-run the bios role (invoke provision --tags bios) and reboot the node "
                       "to bring back {c}; find who changed it (BMC log)"),
    (r"^bmc\.(sensor|temperature|voltage)\.", "check {c}: airflow, blanks, fans, inlet "
                                                "temperature, PSU/VR; see the BMC's log"),
    (r"^bmc\.log\.", "read {c} in the BMC log, fix the part it names, then clear the log "
                       "and re-run"),
]


def remediation(metric: str, labels: dict[str, str]) -> str:
    c = component(labels)
    special = _labelled_remediation(metric, labels, c)
    if special:
        return special
    for pattern, text in _REMEDIATION:
        if re.search(pattern, metric):
            return text.format(c=c)
    return f"inspect {c}"


def _labelled_remediation(metric: str, labels: dict[str, str], c: str) -> str:
    """Where a label, not the metric, decides the words: an XID's catalog class, a GPU
    that reports no NVLink at all ("" elsewhere)."""
    if metric == "gpu.xid_hardware" and labels.get("action"):
        from validation import xid_catalog

        return xid_catalog.remediation(labels["action"], labels, c)
    if metric == "nvlink.links_up" and labels.get("nvlink") == "none":
        # nvidia-smi says the GPU has no NVLink: no link to reseat
        return (f"{c} reports no NVLink at all (nvidia-smi: 'Device does not have or "
                "support Nvlink'): check it is the ordered part (a SKU without NVLink is "
                "the wrong part: replace it), that the driver is the pinned one, and that "
                "the GPU is not passed through to a VM without its NVLink; there is no link "
                "to reseat")
    return ""


def _labels_key(labels: dict[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


def version_key(v: Any) -> tuple[int, ...]:
    """'2.3.5' -> (2, 3, 5); an HPE ROM 'U58 v1.50' compares by its version (1, 50)."""
    text = re.sub(r"^[A-Za-z]\d+\s+v?", "", str(v).strip())
    return tuple(int(x) for x in re.findall(r"\d+", text))


def compare(op: str, value: Value, limit: Any) -> bool:
    if value is None:
        return False
    if op == "ver>=":
        have, want = version_key(value), version_key(limit)
        return bool(have) and have >= want
    if op == "~":
        return re.search(str(limit), str(value)) is not None
    if op == "in":
        return value in limit
    if isinstance(limit, bool) or isinstance(value, bool):
        eq = value == limit
    elif isinstance(limit, (int, float)) and isinstance(value, (int, float)):
        eq = float(value) == float(limit)
    else:
        eq = str(value) == str(limit)
    if op == "==":
        return eq
    if op == "!=":
        return not eq
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return float(value) >= float(limit) if op == ">=" else float(value) <= float(limit)


def limit_outcome(t: Threshold, value: Value, strict: bool = False) -> Outcome:
    """pass, fail, or below_expected: a provisional limit missed short of its gross-fault
    line (a site that accepts only against the provisional floors sets strict)."""
    if compare(t.op, value, t.value):
        return "pass"
    if t.tier == "provisional" and t.gross is not None and not strict \
            and compare(t.op, value, t.gross):
        return "below_expected"
    return "fail"


def _tier_words(t: Threshold, outcome: str, unit: str) -> str:
    if t.tier != "provisional":
        return f", {t.tier}" if t.tier != "spec" else ""
    if outcome == "below_expected":
        return (f", provisional: below expected, not a gross fault (that is "
                f"{t.op} {t.gross:g}{unit})")
    return f", provisional; gross fault past {t.gross:g}{unit}" if t.gross is not None \
        else ", provisional"


def _applies(t: Threshold, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (t.labels or {}).items())


def _required(profile: Any) -> frozenset[str]:
    return profile.required_needs() if profile is not None else frozenset()


def _status_verdicts(results: list[CheckResult], profile: Any) -> list[Verdict]:
    required = _required(profile)
    out = []
    for r in results:
        if r.status == "ok":
            continue
        missing = sorted(set(r.needs) - required)
        if missing:
            out.append(Verdict(
                check=r.check, metric="check.status", outcome="not_applicable", value=r.status,
                unit="", message=f"not applicable: the profile does not require "
                                 f"{', '.join(missing)} ({r.message})".rstrip(" ()"),
            ))
            continue
        what = _WHAT.get(r.status, r.status)
        out.append(Verdict(
            check=r.check, metric="check.status", outcome="fail", value=r.status, unit="",
            message=f"required check {r.check} {what}: {r.message}",
            remediation=_status_remediation(r),
        ))
    return out


# a workload that ran out of GPU memory, or whose plan found no shape that fits: the job's
# size against the GPUs, not a missing or broken part
_OUT_OF_MEMORY = re.compile(r"out of memory|fits in GPU memory", re.IGNORECASE)


def _status_remediation(r: CheckResult) -> str:
    if _OUT_OF_MEMORY.search(r.message):
        return ("out of GPU memory: the job (shape, world size, GPU memory in the message) "
                "does not fit these GPUs; run it on more GPUs or a smaller shape (site "
                "workloads: {fsdp: {shape: ...}}) or with activation checkpointing "
                "(workloads: {fsdp: {ac: selective}}); if nvidia-smi shows other processes "
                "holding GPU memory, stop them and re-run")
    return ("install or repair what the check needs "
            f"({', '.join(r.needs) or 'nothing special'}) and re-run; "
            "a check that did not run is never a pass")


Group = list[tuple[str, Measurement]]  # (check, measurement) repeats of one metric+labels


def _groups(results: list[CheckResult]) -> dict[tuple[str, LabelKey], Group]:
    groups: dict[tuple[str, LabelKey], Group] = defaultdict(list)
    for r in results:
        for meas in r.measurements:
            groups[(meas.name, _labels_key(meas.labels))].append((r.check, meas))
    return groups


def _reduce(items: list[tuple[str, Measurement]]) -> tuple[Value, dict[str, float] | None]:
    """Repeats -> (median, spread); a single value or non-numbers -> (last, None)."""
    vals = [mm.value for _, mm in items]
    nums = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(vals) > 1 and len(nums) == len(vals):
        return statistics.median(nums), {"min": min(nums), "max": max(nums), "n": len(nums)}
    return vals[-1], None


def _fmt(v: Value) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def judge(results: list[CheckResult], profile: Any) -> list[Verdict]:
    """Every verdict for one node's results under a profile (with site thresholds merged)."""
    verdicts = _status_verdicts(results, profile)
    thresholds: list[Threshold] = list(profile.thresholds) if profile is not None else []
    groups = _groups(results)
    reduced: dict[tuple[str, LabelKey], tuple[str, Value, dict[str, float] | None]] = {}
    for key, items in groups.items():
        value, spread = _reduce(items)
        reduced[key] = (items[-1][0], value, spread)
    matched: set[int] = set()
    by_metric: dict[str, list[tuple[int, Threshold]]] = defaultdict(list)
    for i, t in enumerate(thresholds):
        by_metric[t.metric].append((i, t))
    for (name, lkey), (check, value, spread) in reduced.items():
        labels = dict(lkey)
        metric = metrics.METRICS.get(name)
        if metric is None:
            verdicts.append(Verdict(check, name, "fail", value, "", labels,
                                    message=f"{check} emitted unknown metric {name}",
                                    remediation="fix the check: register the metric"))
            continue
        apply = [(i, t) for i, t in by_metric.get(name, ()) if _applies(t, labels)]
        if not apply:
            if metric.judged:
                verdicts.append(Verdict(
                    check, name, "fail", value, metric.unit, labels, spread=spread,
                    message=f"{name} = {_fmt(value)} on {component(labels)}: the profile has no "
                            "threshold for it", remediation="add a threshold with provenance "
                                                        "to the profile"))
            continue
        strict = bool(getattr(profile, "provisional_strict", False))
        for i, t in apply:
            matched.add(i)
            outcome = limit_outcome(t, value, strict)
            unit = f" {metric.unit}" if metric.unit else ""
            if value is None:
                msg = f"{name} could not be read on {component(labels)}"
            else:
                msg = (f"{name} = {_fmt(value)}{unit} on {component(labels)} "
                       f"(limit {t.op} {t.value}{unit}{_tier_words(t, outcome, unit)})")
            verdicts.append(Verdict(check, name, outcome, value, metric.unit, labels, t, msg,
                                    "" if outcome == "pass" else remediation(name, labels),
                                    spread))
    verdicts += _outlier_verdicts(reduced, thresholds)
    readings: Readings = defaultdict(list)
    for (name, lkey), (_, value, _) in reduced.items():
        readings[name].append((lkey, value))
    verdicts += [_unmeasured(t, results, readings, profile)
                 for i, t in enumerate(thresholds) if i not in matched]
    return verdicts


Readings = dict[str, list[tuple[LabelKey, Value]]]  # metric -> (labels, reduced value)


def _unmeasured(t: Threshold, results: list[CheckResult], readings: Readings,
                profile: Any) -> Verdict:
    """A limit no measurement met: judged from why. Not applicable only for a stated
    reason (the check is not in this run, the profile does not require what it needs, a
    probe fact the profile names, a label the level chose); otherwise it fails as not
    measured, naming the check that should have measured it."""
    from validation.checks.catalog import RACK_CHECK, measured_by

    labels = dict(t.labels or {})
    named = component(labels)
    part = "" if not labels else f" for {named}" if named != "node" else \
        f" ({', '.join(f'{k} {v}' for k, v in labels.items())})"

    def verdict(check: str, outcome: Outcome, why: str) -> Verdict:
        fix = remediation(t.metric, labels) if outcome == "fail" else ""
        return Verdict(check, t.metric, outcome, None, t.unit, labels, t,
                       f"{t.metric}{part} {why}", fix)

    specs = measured_by(t.metric)
    if not specs:
        return verdict("judge", "fail", "not measured: no check measures it (a profile limit "
                                        "on a metric nothing emits)")
    if any(s.name == RACK_CHECK for s in specs):
        return verdict(RACK_CHECK, "not_applicable", "is judged across nodes by the rack "
                                                     "step (rackready.decide.rack), not per node")
    by_name = {r.check: r for r in results}
    ran = [by_name[s.name] for s in specs if s.name in by_name]
    if not ran:
        s = specs[0]
        return verdict(s.name, "not_applicable",
                       f"not measured: {' or '.join(x.name for x in specs)} is not part of "
                       f"this run ({s.name} runs at the {', '.join(s.levels)} level(s))")
    ok = [r for r in ran if r.status == "ok"]
    required = _required(profile)
    if not ok:
        r = ran[0]
        missing = sorted(set(r.needs) - required)
        if missing:
            said = f"{r.check} {r.status}" + (f": {r.message}" if r.message else "")
            return verdict(r.check, "not_applicable", "not applicable: the profile does not "
                                                      f"require {', '.join(missing)} ({said})")
        # the check's own verdict fails the node and says why, once (not once per limit)
        return verdict(r.check, "not_applicable",
                       f"not measured: required check {r.check} {_WHAT.get(r.status, r.status)}"
                       " (its check.status verdict fails the node)")
    check = ok[0].check
    needs = {n for s in specs if s.name == check for n in s.metric_needs.get(t.metric, ())}
    if needs and not needs <= required:
        return verdict(check, "not_applicable", "not applicable: the profile does not require "
                                                f"{', '.join(sorted(needs - required))}")
    fact = _fact(t, readings, profile)
    if fact:
        return verdict(check, "not_applicable", f"not applicable: {fact}")
    measured = sorted({dict(lkey).get(k, "") for lkey, _ in readings.get(t.metric, ())
                       for k in set(labels) & LEVEL_LABELS} - {""})
    if measured and set(labels) & LEVEL_LABELS:
        chose = ", ".join(sorted(set(labels) & LEVEL_LABELS))
        return verdict(check, "not_applicable",
                       f"not measured at this level: {check} ran {chose} "
                       f"{', '.join(measured)} (the level's or the device's choice)")
    if labels:  # one part of a metric (one NVLink pair, one cmdline token) went missing
        return Verdict(check, t.metric, "fail", None, t.unit, labels, t,
                       f"{t.metric} expected{part} but not measured: "
                       f"{check} ran and reported none for it", remediation(t.metric, labels))
    return verdict(check, "fail", f"not measured: {check} ran and reported no {t.metric}")


_WHAT = {"skipped": "could not run", "error": "crashed or could not parse its probe",
         "timeout": "ran past its time limit"}


def _fact(t: Threshold, readings: Readings, profile: Any) -> str:
    """The profile's probe fact that makes t not applicable here, in words; "" if none:
    every reading of the fact (at least one) must hold its value."""
    labels = t.labels or {}
    for rule in getattr(profile, "not_applicable", ()):
        if t.metric not in rule.metrics or not _applies_to(rule.labels, labels):
            continue
        seen = readings.get(rule.fact, [])
        if seen and all(compare("==", v, rule.value) for _, v in seen):
            where = f"{len(seen)} reading{'s' if len(seen) > 1 else ''}"
            return f"{rule.fact} = {_fmt(seen[0][1])} ({where}): {rule.reason}"
    return ""


def _applies_to(want: dict[str, str] | None, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (want or {}).items())


def _outlier_verdicts(reduced: dict[tuple[str, LabelKey], tuple[str, Value, Any]],
                      thresholds: list[Threshold]) -> list[Verdict]:
    out = []
    for t in thresholds:
        if not t.outlier_k:
            continue
        metric = metrics.get(t.metric)
        # peers: same metric and same non-entity labels (e.g. same dtype), different GPU
        peers: dict[LabelKey, dict[str, tuple[str, dict[str, str], float]]] = defaultdict(dict)
        for (name, lkey), (check, value, _) in reduced.items():
            if name != t.metric or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            labels = dict(lkey)
            if not _applies(t, labels):
                continue
            kind = tuple((k, v) for k, v in lkey if k not in ENTITY_LABELS)
            entity = ",".join(f"{k}={labels[k]}" for k in ENTITY_LABELS if k in labels)
            peers[kind][entity] = (check, labels, float(value))
        for group in peers.values():
            vals = {e: v for e, (_, _, v) in group.items()}
            med = statistics.median(vals.values()) if vals else 0.0
            for e in sorted(fleet_outliers(vals, t.outlier_k, metric.better)):
                check, labels, v = group[e]
                out.append(Verdict(
                    check, t.metric, "fail", v, metric.unit, labels, t,
                    f"{t.metric} = {_fmt(v)} on {component(labels)} is more than {t.outlier_k:g} "
                    f"robust deviations from its peers (median {_fmt(med)})",
                    remediation(t.metric, labels)))
    return out


def judge_fleet(node_results: dict[str, list[CheckResult]], profile: Any
                ) -> dict[str, list[Verdict]]:
    """Judge each node, then compare nodes: a node far below the others fails even above
    the floor. Node values are each node's median over its GPUs of every outlier metric."""
    verdicts = {node: judge(results, profile) for node, results in node_results.items()}
    thresholds = [t for t in (profile.thresholds if profile is not None else ()) if t.outlier_k]
    for t in thresholds:
        metric = metrics.get(t.metric)
        per_kind: dict[LabelKey, dict[str, float]] = defaultdict(dict)
        for node, results in node_results.items():
            vals_by_kind: dict[LabelKey, list[float]] = defaultdict(list)
            for r in results:
                for meas in r.measurements:
                    if (meas.name == t.metric and isinstance(meas.value, (int, float))
                            and not isinstance(meas.value, bool) and _applies(t, meas.labels)):
                        kind = tuple(sorted((k, v) for k, v in meas.labels.items()
                                            if k not in ENTITY_LABELS))
                        vals_by_kind[kind].append(float(meas.value))
            for kind, vals in vals_by_kind.items():
                per_kind[kind][node] = statistics.median(vals)
        for kind, by_node in per_kind.items():
            med = statistics.median(by_node.values())
            for node in sorted(fleet_outliers(by_node, t.outlier_k, metric.better)):
                labels = {**dict(kind), "node": node}
                verdicts[node].append(Verdict(
                    "fleet", t.metric, "fail", by_node[node], metric.unit, labels, t,
                    f"{t.metric} = {_fmt(by_node[node])} on node {node} is more than "
                    f"{t.outlier_k:g} robust deviations from the other nodes "
                    f"(median {_fmt(med)})", remediation(t.metric, labels)))
    return verdicts


def node_outcome(verdicts: list[Verdict], finished: bool = True) -> str:
    if not finished:
        return "INCOMPLETE"
    return "FAIL" if any(v.outcome == "fail" for v in verdicts) else "PASS"
