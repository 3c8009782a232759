"""lab.up / lab.down / lab.status / lab.fault / lab.heal."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rackready.errors import EnvironmentProblem, UserError
from rackready_lab import config, keys, network, nodes, repo, rootfs, slurm
from rackready_lab import inventory as lab_inventory
from rackready_lab.config import NodeSpec
from rackready_lab.redfish import bmc as lab_bmc
from rackready_lab.shell import ensure_host_packages, require_root


@dataclass
class NodeStatus:
    name: str
    ip: str
    platform: str
    fabric: str
    running: bool
    ssh: bool
    faults: list[str]


def _state_file() -> Path:
    return config.STATE_DIR / "lab.json"


def load_specs() -> list[NodeSpec]:
    path = _state_file()
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    return [NodeSpec(**n) for n in data["nodes"]]


def _save(specs: list[NodeSpec], drives: dict[str, list[str]]) -> None:
    data = {"nodes": [asdict(s) for s in specs], "drives": drives}
    _state_file().write_text(json.dumps(data, indent=2) + "\n")


def _drives() -> dict[str, list[str]]:
    path = _state_file()
    return json.loads(path.read_text()).get("drives", {}) if path.exists() else {}


def plan(count: int, profile: str | None, secure_boot: bool = False) -> list[NodeSpec]:
    if not 1 <= count <= config.MAX_NODES:
        raise UserError(f"--nodes must be between 1 and {config.MAX_NODES}, not {count}")
    if profile is not None:
        platform = profile.removesuffix("-lab")
        if platform not in config.PLATFORMS:
            choices = ", ".join(f"{p}-lab" for p in config.PLATFORMS)
            raise UserError(f"unknown lab profile '{profile}' (choose from: {choices})")
    specs = []
    for i in range(count):
        default_platform, fabric = config.DEFAULT_PLATFORMS[i % len(config.DEFAULT_PLATFORMS)]
        platform = profile.removesuffix("-lab") if profile else default_platform
        specs.append(NodeSpec(config.node_name(i + 1), i + 1, platform, fabric, secure_boot))
    return specs


def up(count: int = 2, profile: str | None = None, progress=print,
       secure_boot: bool = False) -> list[NodeSpec]:
    """Boot the lab; nodes already running are left alone (idempotent)."""
    require_root()
    specs = plan(count, profile, secure_boot)
    existing = load_specs()
    # growing the lab keeps the nodes it has: theirs must be the first names of the new plan
    if existing and [s.name for s in existing] != [s.name for s in specs][: len(existing)]:
        raise UserError("the lab is up with other nodes; run `invoke lab.down` first")
    if existing and len(existing) > len(specs):
        raise UserError(
            f"the lab has {len(existing)} nodes; run `invoke lab.down` to shrink it"
        )
    pairs = zip(existing, specs, strict=False)
    if any((e.platform, e.fabric, e.secure_boot) != (s.platform, s.fabric, s.secure_boot)
           for e, s in pairs):
        raise UserError("the lab is up with other profiles; run `invoke lab.down` first")
    if existing and len(existing) == len(specs) and all(nodes.pid_of(s) for s in specs) \
            and repo.serving_pid() and nodes.pid_of(config.jump_spec()) \
            and nodes.pid_of(slurm.SPEC):
        lab_bmc.start_all(specs)  # the nodes' BMCs: idempotent
        return specs  # already up: the nodes' apt indexes stay valid (no rebuild)
    installed = ensure_host_packages()
    if installed:
        progress(f"installed controller packages: {' '.join(installed)}")
    config.STATE_DIR.mkdir(parents=True, exist_ok=True)
    progress("root file system: " + str(rootfs.cached_rootfs()))
    base = rootfs.ensure_rootfs()
    keys.ensure_client_key()
    keys.write_ssh_config()

    from rackready_lab.hwsim.packages import build_packages
    from rackready_lab.hwsim.state import build_state
    from rackready_lab.hwsim.sysroot import write_node_state

    progress("package repository: Debian packages, hwsim stand-ins, wheels")
    debs = build_packages(config.STATE_DIR / "hwsim-debs")
    repo.build(base, debs, extra=list(slurm.PACKAGES))
    network.ensure_bridge()
    repo.serve()

    drives = _drives()
    known = [_jump_up(base, progress)]
    booted = []
    for spec in specs:
        if nodes.pid_of(spec) is not None:
            known.append(_known_line(spec))
            continue
        sb = ", Secure Boot on" if spec.secure_boot else ""
        progress(f"{spec.name}: {spec.platform} ({spec.fabric}{sb}) at {spec.ip}")
        known.append(nodes.create(spec, base, specs))
        # A fresh OS: no driver loaded, no services; provisioning brings them.
        state = build_state(spec.platform, spec.name, fabric=spec.fabric, provisioned=False,
                            secure_boot=spec.secure_boot)
        write_node_state(state, spec.root)
        slurm.install_gpu_devices(spec)
        network.ensure_node_network(spec)
        network.ensure_nic_netdevs(spec, [n["netdev"] for n in state["nics"]])
        nodes.detach_drives(drives.get(spec.name, []))
        drives[spec.name] = nodes.attach_drives(spec)
        nodes.boot(spec, drives[spec.name])
        booted.append(spec)
    known.append(slurm.up(base, specs, progress))
    keys.write_known_hosts(known)
    _save(specs, drives)
    jump = config.jump_spec()
    nodes.wait_for_ssh(jump)
    for spec in booted:
        nodes.wait_for_ssh(spec)
        progress(f"{spec.name}: up, SSH host key verified")
    # One Redfish BMC per node, on the controller (rackready_lab/redfish/bmc.py).
    lab_bmc.start_all(specs)
    slurm.configure(specs)
    progress(f"{slurm.SPEC.name}: slurmctld up "
             "(the nodes join with `invoke provision --inventory lab --playbook slurm`)")
    lab_inventory.write(specs, drives)
    return specs


def _jump_up(base: Path, progress) -> str:
    """The jump host (booted unless it runs); returns its known_hosts line."""
    jump = config.jump_spec()
    if nodes.pid_of(jump) is not None:
        return _known_line(jump)
    progress(f"{jump.name}: jump host (SSH only) at {jump.ip}")
    line = nodes.create_jump(base)
    network.ensure_node_network(jump)
    nodes.boot(jump, [])
    return line


def _known_line(spec: NodeSpec) -> str:
    algo, blob = (spec.root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2]
    return f"{spec.name},{spec.ip} {algo} {blob}"


def down(progress=print) -> None:
    """Stop every node and remove everything the lab made (the cache stays)."""
    require_root()
    specs = load_specs()
    drives = _drives()
    # every machine powers off at once: each shutdown mostly waits on its own systemd
    nodes.stop_all([*specs, config.jump_spec(), slurm.SPEC])
    for spec in specs:
        network.remove_node_network(spec)
        nodes.detach_drives(drives.get(spec.name, []))
        progress(f"{spec.name}: down")
    jump = config.jump_spec()
    network.remove_node_network(jump)
    slurm.down()
    # Leftovers from an interrupted run that the state file does not know.
    nodes.detach_drives(nodes.lab_loop_devices())
    for ns in network.lab_namespaces():
        network.remove_node_network(_spec_for_netns(ns))
    repo.stop_serving()
    repo.stop_signing_agent()
    lab_bmc.stop_all()
    network.remove_bridge()
    import shutil

    shutil.rmtree(config.STATE_DIR / "nodes", ignore_errors=True)
    _state_file().unlink(missing_ok=True)
    lab_inventory.remove()
    config.vault_password_file().unlink(missing_ok=True)


def _spec_for_netns(ns: str) -> NodeSpec:
    name = ns.removeprefix("rr-")
    return NodeSpec(name, 0, "", "")


def reboot(name: str, bmc: bool = True) -> None:
    """Power-cycle a node (what a site does after provisioning flags a reboot): the
    simulated kernel then boots with the GRUB arguments the roles wrote, drivers load
    from modules-load.d and the boot-time units (RoCE QoS) run again. bmc=False when
    the BMC itself asked (ComputerSystem.Reset): it has applied its BIOS settings."""
    require_root()
    spec = find(name)
    nodes.stop(spec)
    if bmc:
        lab_bmc.power_cycle(spec)  # pending BIOS settings take effect at POST
    nodes.boot(spec, _drives().get(spec.name, []))
    nodes.wait_for_ssh(spec)
    # systemd reached multi-user: the boot-time units have run
    nodes.ssh(spec, "systemctl is-system-running --wait >/dev/null || true")


def reboot_all(names: list[str]) -> None:
    """Power-cycle several nodes at once, as a site reboots a rack after provisioning."""
    nodes.at_once(reboot, names)


def status() -> list[NodeStatus]:
    out = []
    for spec in load_specs():
        running = nodes.pid_of(spec) is not None
        ssh_ok = running and nodes.ssh(spec, "true", check=False).returncode == 0
        out.append(
            NodeStatus(spec.name, spec.ip, spec.platform, spec.fabric, running, ssh_ok,
                       _faults(spec))
        )
    return out


def find(name: str) -> NodeSpec:
    specs = load_specs()
    for spec in specs:
        if spec.name == name:
            return spec
    known = ", ".join(s.name for s in specs) or "none: run `invoke lab.up`"
    raise UserError(f"unknown lab node '{name}' (lab nodes: {known})")


def _state_path(spec: NodeSpec) -> Path:
    return spec.root / "var/lib/hwsim/state.json"


def _faults(spec: NodeSpec) -> list[str]:
    path = _state_path(spec)
    hw = json.loads(path.read_text()).get("faults", []) if path.exists() else []
    return [f["kind"] for f in hw] + lab_bmc.faults(spec)


def fault(name: str, kind: str, target: str | None = None) -> str:
    """Inject a simulated hardware fault; returns what it hit, in words."""
    from rackready_lab.hwsim.faults import FAULT_KINDS, apply_fault
    from rackready_lab.hwsim.sysroot import locked_node_state

    spec = find(name)
    if kind in lab_bmc.FAULT_KINDS:  # faults the node's BMC shows (Redfish)
        return lab_bmc.fault(spec, kind, target)
    if kind not in FAULT_KINDS:
        kinds = ", ".join((*FAULT_KINDS, *lab_bmc.FAULT_KINDS))
        raise UserError(f"unknown fault '{kind}' (kinds: {kinds})")
    # The node's current state: its tools may have changed it (modules, mlxconfig).
    with locked_node_state(spec.root) as state:
        try:
            new = apply_fault(state, kind, target)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        state.clear()
        state.update(new)
    return _describe(new["faults"][-1])


def _describe(record: dict) -> str:
    return str(record.get("description") or record.get("kind"))


# Daemons a fault can stop; heal starts them again where they are enabled.
HEALED_SERVICES = ("nvidia-fabricmanager", "nvidia-persistenced", "nvidia-dcgm")


def heal(name: str) -> None:
    from rackready_lab.hwsim.faults import heal as heal_state
    from rackready_lab.hwsim.sysroot import locked_node_state

    spec = find(name)
    lab_bmc.heal(spec)
    with locked_node_state(spec.root) as state:
        healed = heal_state(state)
        state.clear()
        state.update(healed)
    if nodes.pid_of(spec) is None:
        return
    # As after a repair: daemons a fault stopped are started again, and heal
    # returns once they run (the fabric manager brings the fabric back to Completed).
    enabled = nodes.ssh(
        spec,
        f"for u in {' '.join(HEALED_SERVICES)}; do systemctl is-enabled -q $u 2>/dev/null "
        "|| continue; echo $u; systemctl is-active -q $u "
        "|| { systemctl reset-failed $u; systemctl restart $u; }; done; true",
        check=False,
    ).stdout.split()
    _wait_for_services(spec, [u for u in enabled if u in HEALED_SERVICES])


def _wait_for_services(spec: NodeSpec, units: list[str], timeout_s: float = 30) -> None:
    from rackready_lab.hwsim.sysroot import read_node_state

    deadline = time.monotonic() + timeout_s
    while True:
        services = read_node_state(spec.root).get("services", {})
        down = [u for u in units if not services.get(u, {}).get("running")]
        if not down:
            return
        if time.monotonic() > deadline:
            raise EnvironmentProblem(
                f"{spec.name}: {', '.join(down)} not running {timeout_s:.0f}s after heal; "
                f"see journalctl -u {down[0]} on the node")
        time.sleep(0.5)
