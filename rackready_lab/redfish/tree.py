"""Build a lab BMC's Redfish tree from the node's simulated hardware (hwsim state).

The identities (chassis serial, GPU serials and VBIOS, NIC and drive firmware)
come from the same hwsim state the node's own tools answer from, so what the
controller reads out of band matches what the node reports in band. Vendor
facts (paths, BIOS attributes, PSUs, fans, firmware components) are data:
data/<vendor>.yml, provenance in README.md.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from .base import ROOT, Paths, collection, ref, vendor_data
from .envelope import model as envelope_model
from .envelope import power as envelope_power
from .envelope import thermal as envelope_thermal

SCHEMA = 1
VENDOR_FILES = {"Dell Inc.": "dell-idrac9", "HPE": "hpe-ilo6"}


def _serial(node: str, *parts: object, digits: int = 6) -> str:
    h = hashlib.sha256("/".join(map(str, (node, *parts))).encode()).hexdigest()
    return str(int(h[:12], 16) % 10**digits).zfill(digits)


def ok(state: str = "Enabled") -> dict[str, str]:
    return {"Health": "OK", "HealthRollup": "OK", "State": state}


def build(hw: dict[str, Any]) -> dict[str, Any]:
    """The BMC state of one lab node: resources, BIOS, jobs, logs (JSON)."""
    vendor_file = VENDOR_FILES[hw["chassis"]["vendor"]]
    v = vendor_data(vendor_file)
    p = Paths(v)
    node = hw["node"]
    product = hw["chassis"]["product"]
    serial = hw["chassis"]["serial"]
    dell = v["vendor"] == "Dell"
    hgx = bool(hw.get("nvswitches"))
    facts = {"product": product, "serial": serial, "bios_version": v["bios"]["version"],
             "bmc_version": hw["chassis"]["bmc"]["firmware"],
             "bmc_model": (v.get("bmc_model_by_product") or {}).get(product, v["bmc_model"]),
             "sku": f"P{_serial(node, 'sku', digits=5)}-B21"}
    board_serial = ("CN" + _serial(node, "board", digits=12)) if dell else serial
    r: dict[str, dict[str, Any]] = {}

    def add(path: str, otype: str, **props: Any) -> dict[str, Any]:
        res = {"@odata.id": path, "@odata.type": otype, **props}
        r[path] = res
        return res

    uuid = hashlib.sha256(f"{node}/bmc-uuid".encode()).hexdigest()
    add(ROOT, "#ServiceRoot.v1_15_0.ServiceRoot", Id="RootService", Name="Root Service",
        RedfishVersion="1.17.0",
        UUID=f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}",
        Vendor=v["vendor"], Product=v["bmc_product"].format(**facts),
        Systems=ref(f"{ROOT}/Systems"), Chassis=ref(f"{ROOT}/Chassis"),
        Managers=ref(f"{ROOT}/Managers"), SessionService=ref(f"{ROOT}/SessionService"),
        AccountService=ref(f"{ROOT}/AccountService"), UpdateService=ref(f"{ROOT}/UpdateService"),
        TaskService=ref(f"{ROOT}/TaskService"), Registries=ref(f"{ROOT}/Registries"),
        Links={"Sessions": ref(p.sessions)},
        ProtocolFeaturesSupported={"ExpandQuery": {"ExpandAll": False},
                                   "SelectQuery": False, "FilterQuery": False})
    r[f"{ROOT}/Systems"] = collection(f"{ROOT}/Systems", "ComputerSystemCollection",
                                      "Computer System Collection", [p.system])
    r[f"{ROOT}/Chassis"] = collection(f"{ROOT}/Chassis", "ChassisCollection",
                                      "Chassis Collection", [p.chassis])
    r[f"{ROOT}/Managers"] = collection(f"{ROOT}/Managers", "ManagerCollection",
                                       "Manager Collection", [p.manager])

    # --- the computer system -------------------------------------------------
    cpu = hw["cpu"]
    gpus = [g for g in hw["gpus"]]
    procs = [f"{p.system}/Processors/CPU.Socket.{s + 1}" if dell else
             f"{p.system}/Processors/{s + 1}" for s in range(cpu["sockets"])]
    gpu_procs = [f"{p.system}/Processors/{'Video.Slot.' if dell else 'GPU'}{g['index'] + 1}"
                 for g in gpus]
    add(p.system, "#ComputerSystem.v1_20_0.ComputerSystem", Id=v["system_id"], Name="System",
        SystemType="Physical", Manufacturer=hw["chassis"]["vendor"], Model=product,
        SKU=serial if dell else facts["sku"], SerialNumber=board_serial if dell else serial,
        BiosVersion=v["bios"]["version"], PowerState="On", HostName=node,
        Status=ok(), ProcessorSummary={"Count": cpu["sockets"], "Model": cpu["model"],
                                       "Status": ok()},
        MemorySummary={"TotalSystemMemoryGiB": 2048, "Status": ok()},
        Bios=ref(p.bios), Processors=ref(f"{p.system}/Processors"),
        Storage=ref(f"{p.system}/Storage"), LogServices=ref(f"{p.system}/LogServices"),
        Boot={"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None",
              "BootSourceOverrideMode": "UEFI"},
        Links={"Chassis": [ref(p.chassis)], "ManagedBy": [ref(p.manager)]},
        Actions={"#ComputerSystem.Reset": {
            "target": f"{p.system}/Actions/ComputerSystem.Reset",
            "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "ForceRestart",
                                                  "GracefulRestart", "GracefulShutdown",
                                                  "PushPowerButton", "PowerCycle", "Nmi"]}})
    r[f"{p.system}/Processors"] = collection(f"{p.system}/Processors", "ProcessorCollection",
                                             "Processors Collection", procs + gpu_procs)
    for s, path in enumerate(procs):
        add(path, "#Processor.v1_18_0.Processor", Id=path.rsplit("/", 1)[1],
            Name=f"CPU {s + 1}", ProcessorType="CPU", Manufacturer="Intel",
            Model=cpu["model"], Socket=f"CPU.Socket.{s + 1}" if dell else f"Proc {s + 1}",
            Status=ok())
    for g, path in zip(gpus, gpu_procs, strict=True):
        add(path, "#Processor.v1_18_0.Processor", Id=path.rsplit("/", 1)[1], Name=g["name"],
            ProcessorType="GPU", Manufacturer="NVIDIA Corporation", Model=g["name"],
            SerialNumber=g["serial"], PartNumber=g["board_part"],
            FirmwareVersion=g["vbios"], UUID=g["uuid"].removeprefix("GPU-"),
            Location={"PartLocation": {"ServiceLabel": f"GPU {g['index'] + 1}",
                                       "LocationType": "Slot"}},
            Status=ok())

    storage = f"{p.system}/Storage/{'NVMe.Controller.1' if dell else 'DE00A000'}"
    drives = [f"{storage}/Drives/{'Disk.Bay.' if dell else ''}{i}" for i in
              range(len(hw["nvme"]))]
    r[f"{p.system}/Storage"] = collection(f"{p.system}/Storage", "StorageCollection",
                                          "Storage Collection", [storage])
    add(storage, "#Storage.v1_15_0.Storage", Id=storage.rsplit("/", 1)[1],
        Name="NVMe direct attached", Drives=[ref(d) for d in drives],
        **{"Drives@odata.count": len(drives)}, Status=ok())
    for d, path in zip(hw["nvme"], drives, strict=True):
        add(path, "#Drive.v1_17_0.Drive", Id=path.rsplit("/", 1)[1], Name=d["model"],
            Model=d["model"], SerialNumber=d["serial"], Revision=d["fw"], Protocol="NVMe",
            MediaType="SSD", CapacityBytes=d["bytes"], Status=ok())

    # --- BIOS ----------------------------------------------------------------
    attrs = {a["name"]: (a["current"].format(**facts) if isinstance(a["current"], str)
                         else a["current"]) for a in v["bios"]["attributes"]}
    add(p.bios, "#Bios.v1_2_0.Bios", Id="Bios", Name="BIOS Configuration Current Settings",
        AttributeRegistry=v["bios"]["registry"],
        **{"@Redfish.Settings": {
            "@odata.type": "#Settings.v1_3_5.Settings",
            "SettingsObject": ref(p.bios_settings),
            "SupportedApplyTimes": (["Immediate", "OnReset", "AtMaintenanceWindowStart",
                                     "InMaintenanceWindowOnReset"] if dell else ["OnReset"])}},
        Actions={"#Bios.ResetBios": {"target": f"{p.bios}/Actions/Bios.ResetBios"}},
        Links={"ActiveSoftwareImage": ref(f"{p.firmware}/"
                                          + _fw_id(v, v["firmware"][0 if dell else 1], facts))})
    add(p.bios_settings, "#Bios.v1_2_0.Bios", Id="Settings", Name="BIOS Configuration Pending "
        "Settings", AttributeRegistry=v["bios"]["registry"])
    reg_entries = [{"AttributeName": a["name"], "DisplayName": a["display"], "Type": a["type"],
                    "ReadOnly": bool(a.get("read_only")), "ResetRequired": True,
                    **({"Value": [{"ValueName": x, "ValueDisplayName": x}
                                  for x in a["values"]]} if "values" in a else {})}
                   for a in v["bios"]["attributes"]]
    r[f"{ROOT}/Registries"] = collection(f"{ROOT}/Registries",
                                         "MessageRegistryFileCollection",
                                         "Registry File Collection", [p.registry])
    add(p.registry, "#AttributeRegistry.v1_3_6.AttributeRegistry", Id=v["bios"]["registry"],
        Name="BIOS Attribute Registry", Language="en", OwningEntity=v["vendor"],
        RegistryVersion="1.0.3", RegistryEntries={"Attributes": reg_entries})

    # --- chassis: power, thermal -----------------------------------------------
    add(p.chassis, "#Chassis.v1_23_0.Chassis", Id=v["chassis_id"], Name="Computer System "
        "Chassis", ChassisType="RackMount", Manufacturer=hw["chassis"]["vendor"], Model=product,
        SKU=serial if dell else facts["sku"], SerialNumber=board_serial if dell else serial,
        PartNumber="0XE968A01" if dell else facts["sku"], PowerState="On", Status=ok(),
        Power=ref(f"{p.chassis}/Power"), Thermal=ref(f"{p.chassis}/Thermal"),
        **({"ThermalSubsystem": ref(f"{p.chassis}/ThermalSubsystem")}
           if v.get("thermal_subsystem") else {}),
        Links={"ComputerSystems": [ref(p.system)], "ManagedBy": [ref(p.manager)]})
    ps = v["power_supplies"]
    psus = []
    for i in range(ps["count"]):
        psus.append({"@odata.id": f"{p.chassis}/Power#/PowerSupplies/{i}", "MemberId": str(i),
                     "Name": ps["name"].format(n=i + 1), "Manufacturer": v["vendor"],
                     "Model": ps["model"], "PartNumber": ps["part"],
                     "SerialNumber": ps["serial_prefix"] + _serial(node, "psu", i, digits=8),
                     "FirmwareVersion": str(ps["firmware"]),
                     "PowerCapacityWatts": ps["capacity_w"], "PowerSupplyType": "AC",
                     "LineInputVoltage": 230, "LineInputVoltageType": ps["line_input_type"],
                     **({} if dell else {"Oem": {"Hpe": {"BayNumber": i + 1}}}),
                     "Status": {"Health": "OK", "State": "Enabled"}})
    redundancy = [{"@odata.id": f"{p.chassis}/Power#/Redundancy/0", "MemberId": "0",
                   "Name": "System Board PS Redundancy" if dell else "PowerSupply Redundancy",
                   "Mode": "N+m", "MinNumNeeded": ps["min_needed"],
                   "MaxNumSupported": ps["count"],
                   "RedundancySet": [ref(x["@odata.id"]) for x in psus],
                   "Status": {"Health": "OK", "State": "Enabled"}}]
    volts = [{"@odata.id": f"{p.chassis}/Power#/Voltages/{i}", "MemberId": str(i),
              "Name": x["name"], "ReadingVolts": x["reading"],
              "LowerThresholdCritical": x["lower_crit"],
              "UpperThresholdCritical": x["upper_crit"],
              "Status": {"Health": "OK", "State": "Enabled"}}
             for i, x in enumerate(v["voltages"])]
    add(f"{p.chassis}/Power", "#Power.v1_7_1.Power", Id="Power", Name="Power",
        PowerSupplies=psus, Redundancy=redundancy, Voltages=volts,
        PowerControl=[{"@odata.id": f"{p.chassis}/Power#/PowerControl/0", "MemberId": "0",
                       "Name": "System Power Control", "PowerConsumedWatts": 0,
                       "PowerCapacityWatts": ps["capacity_w"] * ps["min_needed"]}])
    fan = v["fans"]
    fans = [{"@odata.id": f"{p.chassis}/Thermal#/Fans/{i}", "MemberId": str(i),
             "Name": name, "Reading": fan["idle"] - fan["step"] * i,
             "ReadingUnits": fan["units"],
             "LowerThresholdCritical": fan["lower_critical"],
             "LowerThresholdNonCritical": fan["lower_warning"], "PhysicalContext": "SystemBoard",
             "Status": {"Health": "OK", "State": "Enabled"}}
            for i, name in enumerate(fan["names"])]
    temps = [{"@odata.id": f"{p.chassis}/Thermal#/Temperatures/{i}", "MemberId": str(i),
              "Name": t["name"], "ReadingCelsius": t["reading"], "PhysicalContext": t["context"],
              "UpperThresholdNonCritical": t["warn"], "UpperThresholdCritical": t["crit"],
              "Status": {"Health": "OK", "State": "Enabled"}}
             for i, t in enumerate(v["temperatures"])]
    base = len(temps)
    temps += [{"@odata.id": f"{p.chassis}/Thermal#/Temperatures/{base + k}",
               "MemberId": str(base + k), "Name": f"GPU{g['index'] + 1} Temp",
               "ReadingCelsius": g["temp_c"], "PhysicalContext": "GPU",
               "UpperThresholdNonCritical": v["gpu_temperature"]["warn"],
               "UpperThresholdCritical": v["gpu_temperature"]["crit"],
               "Status": {"Health": "OK", "State": "Enabled"}} for k, g in enumerate(gpus)]
    add(f"{p.chassis}/Thermal", "#Thermal.v1_7_1.Thermal", Id="Thermal", Name="Thermal",
        Fans=fans, Temperatures=temps)

    # --- manager, logs ---------------------------------------------------------
    log_paths = [p.log_service(s) for s in v["log_services"]]
    mgr_logs = [x for s, x in zip(v["log_services"], log_paths, strict=True)
                if s["under"] == "manager"]
    sys_logs = [x for s, x in zip(v["log_services"], log_paths, strict=True)
                if s["under"] == "system"]
    add(p.manager, "#Manager.v1_17_0.Manager", Id=v["manager_id"], Name=v["manager_name"],
        ManagerType="BMC", Model=facts["bmc_model"], FirmwareVersion=facts["bmc_version"],
        Status=ok(), LogServices=ref(f"{p.manager}/LogServices"),
        Links={"ManagerForServers": [ref(p.system)], "ManagerForChassis": [ref(p.chassis)]},
        **({"Oem": {"Dell": {"Jobs": ref(p.jobs)}}} if p.jobs else {}),
        Actions={"#Manager.Reset": {"target": f"{p.manager}/Actions/Manager.Reset"}})
    # iLO lists the IML (a system log) beside its own IEL under the manager as well.
    r[f"{p.manager}/LogServices"] = collection(f"{p.manager}/LogServices",
                                               "LogServiceCollection", "Log Service Collection",
                                               mgr_logs + sys_logs)
    r[f"{p.system}/LogServices"] = collection(f"{p.system}/LogServices",
                                              "LogServiceCollection", "Log Service Collection",
                                              sys_logs)
    for svc, path in zip(v["log_services"], log_paths, strict=True):
        add(path, "#LogService.v1_5_0.LogService", Id=svc["id"], Name=svc["name"],
            Description=svc["title"], OverWritePolicy="WrapsWhenFull", MaxNumberOfRecords=1024,
            ServiceEnabled=True, Entries=ref(f"{path}/Entries"), Status=ok(),
            Actions={"#LogService.ClearLog": {"target": f"{path}/Actions/LogService.ClearLog"}})
    if p.jobs:
        add(p.jobs, "#DellJobCollection.DellJobCollection", Name="JobQueue")

    # --- update service: firmware inventory --------------------------------------
    fw = []
    for comp in v["firmware"]:
        if comp.get("hgx") and not hgx:
            continue
        fw.append((_fw_id(v, comp, facts), comp["name"].format(**facts),
                   comp["version"].format(**facts),
                   None))
    ids = v["component_ids"]
    for g in gpus:
        fw.append((_dev_fw_id(v, ids["gpu"], g["vbios"], f"Video.Slot.{g['index'] + 1}-1",
                              len(fw)), f"{g['name']} VBIOS (GPU {g['index'] + 1})",
                   g["vbios"], g["serial"]))
    for s in hw.get("nvswitches", []):
        fw.append((_dev_fw_id(v, ids["nvswitch"], s["fw"], f"NVSwitch.{s['index']}", len(fw)),
                   f"NVIDIA NVSwitch {s['index']}", s["fw"], None))
    for n in hw["nics"]:
        fw.append((_dev_fw_id(v, ids["nic"], n["fw"], f"NIC.Slot.{n['name']}", len(fw)),
                   f"{n['description'].split(',')[0]} ({n['name']})", n["fw"], None))
    for d in hw["nvme"]:
        fw.append((_dev_fw_id(v, ids["drive"], d["fw"], f"Disk.Bay.{d['name']}", len(fw)),
                   f"{d['model']} ({d['name']})", d["fw"], d["serial"]))
    for i, x in enumerate(psus):
        fw.append((_dev_fw_id(v, ids["psu"], x["FirmwareVersion"], f"PSU.Slot.{i + 1}",
                              len(fw)), f"Power Supply {i + 1}", x["FirmwareVersion"],
                   x["SerialNumber"]))
    fw_paths = [f"{p.firmware}/{i}" for i, *_ in fw]
    add(f"{ROOT}/UpdateService", "#UpdateService.v1_11_0.UpdateService", Id="UpdateService",
        Name="Update Service", ServiceEnabled=True, Status=ok(),
        FirmwareInventory=ref(p.firmware))
    r[p.firmware] = collection(p.firmware, "SoftwareInventoryCollection",
                               "Firmware Inventory Collection", fw_paths)
    for (fid, name, version, sn), path in zip(fw, fw_paths, strict=True):
        add(path, "#SoftwareInventory.v1_9_0.SoftwareInventory", Id=fid, Name=name,
            Version=version, Updateable=True, Status={"Health": "OK", "State": "Enabled"},
            **({"SerialNumber": sn} if sn else {}))

    # --- services ------------------------------------------------------------------
    add(f"{ROOT}/SessionService", "#SessionService.v1_1_8.SessionService", Id="SessionService",
        Name="Session Service", ServiceEnabled=True, SessionTimeout=1800,
        Sessions=ref(p.sessions))
    add(f"{ROOT}/AccountService", "#AccountService.v1_12_0.AccountService",
        Id="AccountService", Name="Account Service", ServiceEnabled=True,
        Accounts=ref(f"{ROOT}/AccountService/Accounts"))
    add(f"{ROOT}/TaskService", "#TaskService.v1_2_0.TaskService", Id="TaskService",
        Name="Task Service", ServiceEnabled=True, CompletedTaskOverWritePolicy="Oldest",
        Tasks=ref(p.tasks), Status=ok())

    logs: dict[str, list[dict[str, Any]]] = {s["id"]: [] for s in v["log_services"]}
    state: dict[str, Any] = {
        "schema": SCHEMA, "node": node, "platform": hw["platform"], "vendor": vendor_file,
        "resources": r, "bios": {"current": attrs, "pending": {}}, "jobs": [], "logs": logs,
        "next_id": {"job": 1, "log": 1}, "boots": 0, "unreachable": False, "faults": [],
        # load: the node's load fraction u as the BMC sees it; override (a number in
        # [0, 1], or null) fixes it for tests and demos, else the BMC measures it
        "load": {"override": None},
    }
    state["envelope"] = envelope_model(hw, v, r, p.chassis)
    for path, render in ((f"{p.chassis}/Power", envelope_power),
                         (f"{p.chassis}/Thermal", envelope_thermal)):
        r[path] = render(state, r[path], 0.0)  # stored as at idle
    state["pristine"] = pristine(state)
    return state


# What heal() restores; the rest (BIOS settings, jobs, logs a job wrote) is the node's.
HARDWARE_KEYS = ("resources", "logs", "unreachable")


def pristine(state: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy({k: state[k] for k in HARDWARE_KEYS})


def _fw_id(v: dict[str, Any], comp: dict[str, Any], facts: dict[str, str]) -> str:
    if v["vendor"] == "Dell":
        return f"Installed-{comp['id']}-{comp['version'].format(**facts)}"
    return str(comp["id"])


def _dev_fw_id(v: dict[str, Any], cid: object, version: str, fqdd: str, n: int) -> str:
    # Dell names per-device firmware Installed-<component>-<version>__<FQDD>; iLO numbers them.
    return f"Installed-{cid}-{version}__{fqdd}" if v["vendor"] == "Dell" else str(n + 1)
