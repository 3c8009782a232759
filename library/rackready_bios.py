#!/usr/bin/python
"""Bring a server's BIOS settings to its profile through the BMC (Redfish).

Runs on the controller (the BMC is out of band). The Redfish client is
rackready.redfish (stdlib only), imported from the controller's own Python: the
bios play sets ansible_python_interpreter to ansible_playbook_python.
"""

from __future__ import annotations

import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: rackready_bios
short_description: Apply a BIOS profile through Redfish (iDRAC9, iLO 6), reboot only if asked
description:
  - Logs in to the BMC (Redfish session, basic auth where no session service is offered),
    verifying TLS against O(ca_file) (or the system CA store).
  - Finds the BIOS by links (/redfish/v1 -> Systems -> Bios -> @Redfish.Settings.SettingsObject),
    compares its attributes with O(attributes) and refuses, in one line, an attribute the BIOS
    does not know.
  - When something differs, waits for every pending BMC job (TaskService tasks, Dell's
    Managers/<id>/Jobs) to finish (fails naming the job after O(job_timeout)), PATCHes only the
    differences to the settings object (with C(@Redfish.SettingsApplyTime OnReset) where the BMC
    lists it), and waits until the BMC's job is scheduled.
  - Values already pending (set but waiting for a reboot) are not sent again: a second run
    reports C(changed=false) and still C(reboot_required=true) until the node reboots.
  - Never reboots unless O(reboot=true); then resets the system (ComputerSystem.Reset) and waits
    for the job to complete and the values to read back.
version_added: "0.1.0"
author: rackready
options:
  address:
    description: BMC address (host, host:port or https://host:port).
    type: str
    required: true
  user:
    description: BMC user.
    type: str
    required: true
  password:
    description: BMC password (never logged or returned).
    type: str
    required: true
  ca_file:
    description: CA bundle that signed the BMC's certificate; empty means the system store.
    type: str
    default: ""
  tls_insecure_skip_verify:
    description: Do not verify the BMC's certificate (lab bring-up only; never a default).
    type: bool
    default: false
  attributes:
    description: Wanted BIOS attributes, names and values as the BMC spells them.
    type: dict
    required: true
  implied:
    description:
      - Attributes the BIOS sets itself from another one (Dell SysProfile PerfOptimized forces
        C-states off and makes them read-only): never sent, checked once nothing is pending.
    type: dict
    default: {}
  profile:
    description: Name of the BIOS profile (for messages).
    type: str
    default: ""
  node:
    description: Inventory name of the node (for messages).
    type: str
    default: ""
  timeout:
    description: Seconds for one HTTP request.
    type: int
    default: 30
  job_timeout:
    description: Seconds to wait for pending BMC jobs before applying, and for the job's scheduling.
    type: int
    default: 900
  poll:
    description: Seconds between polls of a job.
    type: int
    default: 10
  reboot:
    description: Reset the system to apply pending settings and wait for them to read back.
    type: bool
    default: false
  reboot_timeout:
    description: Seconds to wait for the settings to be applied after the reset.
    type: int
    default: 3600
"""

EXAMPLES = r"""
- name: BIOS profile
  rackready_bios:
    address: "{{ rackready_bmc_address }}"
    user: "{{ rackready_bmc_user }}"
    password: "{{ rackready_bmc_password }}"
    ca_file: "{{ rackready_bmc_ca_file }}"
    attributes: {SysProfile: PerfOptimized, MmioAbove4Gb: Enabled}
  delegate_to: localhost
  no_log: true
"""

RETURN = r"""
changed:
  description: Whether settings were sent (or, with reboot, applied).
  type: bool
  returned: always
reboot_required:
  description: Settings are pending and take effect only after the node reboots.
  type: bool
  returned: always
applied:
  description: Attributes sent in this run, name -> value.
  type: dict
  returned: always
pending:
  description: Attributes of the profile that wait for a reboot, name -> value.
  type: dict
  returned: always
differences:
  description: One entry per attribute sent, with current and desired values.
  type: list
  returned: always
job:
  description: The BMC job (Dell JID_...) that carries the change, empty if none.
  type: str
  returned: always
bmc_time:
  description: The BMC's clock (Manager DateTime) at the end of the run.
  type: str
  returned: always
msg:
  description: What happened, in one line.
  type: str
  returned: always
"""


def run(params: dict, check_mode: bool, sleep=time.sleep, clock=time.monotonic) -> dict:
    """The module's work, callable from tests; raises RedfishError with one line."""
    from rackready.redfish import bios
    from rackready.redfish.client import Client, RedfishError, link, members

    client = Client(params["address"], params["user"], params["password"],
                    ca_file=params.get("ca_file") or None,
                    insecure_skip_verify=bool(params.get("tls_insecure_skip_verify")),
                    timeout=float(params.get("timeout") or 30), node=params.get("node") or None)
    poll = float(params.get("poll") or 10)
    job_timeout = float(params.get("job_timeout") or 900)
    desired = dict(params["attributes"] or {})
    result = {"changed": False, "reboot_required": False, "applied": {}, "pending": {},
              "differences": [], "job": "", "bmc_time": "", "msg": ""}
    if not params.get("password"):
        raise RedfishError(f"{client.name}: no BMC password (rackready_bmc_password, from "
                           "RACKREADY_BMC_PASSWORD or an ansible-vault file)")
    with client:
        state = bios.read_state(client)
        try:
            p = bios.plan(state, desired, params.get("profile") or "")
        except RedfishError as exc:
            raise RedfishError(f"{client.name}: {exc}") from None
        result["differences"] = p.diff
        result["pending"] = dict(p.pending_ok)
        job_uri = None
        if p.to_set:
            result["changed"] = True
            result["reboot_required"] = True
            result["applied"] = dict(p.to_set)
            if not check_mode:
                bios.wait_jobs_idle(client, job_timeout, poll, sleep, clock)
                job_uri = bios.apply(client, state, p.to_set)
                if job_uri is None:
                    job = bios.newest_bios_job(client)
                    job_uri = job.uri if job else None
                if job_uri:
                    job = bios.wait_job(client, job_uri, {"scheduled", "completed", "running"},
                                        job_timeout, poll, sleep, clock)
                    result["job"] = job.id
                after = bios.read_state(client, state.system)
                missing = [k for k, v in p.to_set.items()
                           if not bios._same(after.pending.get(k, after.current.get(k)), v)]
                if missing:
                    raise RedfishError(f"{client.name}: the BMC accepted the change but does "
                                       f"not hold {', '.join(missing)} as pending")
                result["pending"].update(p.to_set)
        elif p.pending_ok:
            result["reboot_required"] = True
            job = bios.newest_bios_job(client)
            result["job"] = job.id if job else ""
        else:
            implied = dict(params.get("implied") or {})
            wrong = [f"{k} is {state.current.get(k)!r}, the profile expects {v!r}"
                     for k, v in implied.items() if not bios._same(state.current.get(k), v)]
            if wrong:
                raise RedfishError(f"{client.name}: BIOS {'; '.join(wrong)} (set by the BIOS "
                                   "from another attribute: check the system profile)")
        if result["reboot_required"] and params.get("reboot") and not check_mode:
            kind = bios.reset(client, state.system)
            deadline = clock() + float(params.get("reboot_timeout") or 3600)
            if job_uri or result["job"]:
                uri = job_uri or next((j.uri for j in bios.list_jobs(client)
                                       if j.id == result["job"]), None)
                if uri:
                    bios.wait_job(client, uri, {"completed"}, max(1.0, deadline - clock()),
                                  poll, sleep, clock)
            while True:
                now = bios.read_state(client, state.system)
                left = [k for k, v in desired.items() if not bios._same(now.current.get(k), v)]
                if not left:
                    break
                if clock() >= deadline:
                    raise RedfishError(f"{client.name}: after {kind} the BIOS still shows "
                                       f"{', '.join(left)} unchanged")
                sleep(poll)
            result.update(changed=True, reboot_required=False, rebooted=kind)
        managers = members(client, link(client.root, "Managers"))
        if managers:
            result["bmc_time"] = str(client.get(managers[0]).get("DateTime") or "")
    n_set, n_pend = len(result["applied"]), len(result["pending"])
    if result.get("rebooted"):
        result["msg"] = f"BIOS: {len(desired)} setting(s) in force after {result['rebooted']}"
    elif result["reboot_required"]:
        result["msg"] = (f"BIOS: {n_set} setting(s) sent, {n_pend} pending"
                         + (f" (job {result['job']})" if result["job"] else "")
                         + ": REBOOT REQUIRED for them to take effect (reboot the node, "
                           "or run with bios_reboot=true)")
    else:
        result["msg"] = f"BIOS: all {len(desired)} setting(s) already as the profile says"
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "address": {"type": "str", "required": True},
            "user": {"type": "str", "required": True},
            "password": {"type": "str", "required": True, "no_log": True},
            "ca_file": {"type": "str", "default": ""},
            "tls_insecure_skip_verify": {"type": "bool", "default": False},
            "attributes": {"type": "dict", "required": True},
            "implied": {"type": "dict", "default": {}},
            "profile": {"type": "str", "default": ""},
            "node": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 30},
            "job_timeout": {"type": "int", "default": 900},
            "poll": {"type": "int", "default": 10},
            "reboot": {"type": "bool", "default": False},
            "reboot_timeout": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    try:
        from rackready.redfish.client import RedfishError
    except ImportError:
        import sys

        module.fail_json(msg=f"rackready is not importable by {sys.executable}: the bios play "
                             "must run with ansible_python_interpreter=ansible_playbook_python")
        return
    try:
        result = run(module.params, module.check_mode)
    except RedfishError as exc:
        module.fail_json(msg=str(exc))
        return
    except Exception as exc:  # noqa: BLE001  a one-line failure; fail_json scrubs the password
        module.fail_json(msg=f"BMC {module.params['address']}: {type(exc).__name__}: {exc}")
        return
    if module._diff and result["differences"]:
        result["diff"] = {
            "before": "".join(f"{d['attribute']}: {d['current']}\n"
                              for d in result["differences"]),
            "after": "".join(f"{d['attribute']}: {d['desired']}\n"
                             for d in result["differences"])}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
