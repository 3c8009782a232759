"""What the offline bundle carries, derived from the node roles' variables (one source).

The bundle is built on a connected staging host where the node roles never run, so
their variables are resolved here as a play running those roles on that host sees
them (role defaults and vars under the inventory's values, templated by Ansible).
`invoke bundle` hands the result to the offline_bundle role: every package at the
version the roles install, and nccl-tests the way validation_tools installs it
(its prebuilt package, else the release's source tarball and the build tools).
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

from rackready.errors import UserError
from rackready.site.paths import PROJECT_ROOT, inventory_path
from rackready.site.vault import _Loader, _vault_secrets

# The roles whose packages a node installs, and the bundle's own role (its source URLs).
NODE_ROLES = ("nvidia_driver", "fabric_manager", "cuda_toolkit", "nccl", "dcgm",
              "rdma_network", "os_baseline", "nvme_raid", "validation_tools")
ROLES = NODE_ROLES + ("offline_bundle",)
# Where the bundle keeps source tarballs: <offline_bundle_dir>/src/<name>, served as the
# site mirror's src/ (validation_tools_nccl_tests_url points there on air-gapped sites).
SRC = "src"
# The staging host's own kernel, templated there from its facts (a play's variable): the
# headers the bundle carries when the inventory lists no node kernels.
KERNEL_FACT = "{{ ansible_facts['kernel'] }}"
_KERNEL = re.compile(r"^[0-9][0-9A-Za-z.+~_-]*$")  # what `uname -r` prints


@dataclass(frozen=True)
class Source:
    url: str  # where the connected staging host fetches it
    dest: str  # file name under <offline_bundle_dir>/src/


@dataclass(frozen=True)
class Manifest:
    packages: tuple[str, ...]  # name=version (apt-get syntax; a version may end in *)
    sources: tuple[Source, ...]
    nccl_tests_version: str = ""  # the pinned release (the role's defaults template it)

    def extravars(self) -> dict:
        return {"offline_bundle_packages": list(self.packages),
                "offline_bundle_sources": [{"url": s.url, "dest": s.dest}
                                           for s in self.sources],
                # the staging play runs no validation_tools role, so the pin travels here
                "validation_tools_nccl_tests_version": self.nccl_tests_version}


def role_vars(inventory: str | Path, host: str, roles: tuple[str, ...] = ROLES) -> dict:
    """Every variable of `roles` as a play running them on `host` resolves it (untemplated
    values are templated on access through the returned Templar's variables)."""
    # Ansible on first use: a heavy import, kept out of every command's startup
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.playbook.play import Play
    from ansible.plugins.loader import init_plugin_loader
    from ansible.vars.manager import VariableManager

    path = inventory_path(str(inventory))
    init_plugin_loader()
    loader = _Loader()
    noise = io.StringIO()  # Ansible's warnings; errors are said in one line below
    try:
        with contextlib.redirect_stderr(noise):
            _vault_secrets(loader, path)
            im = InventoryManager(loader=loader, sources=[str(path)])
            vm = VariableManager(loader=loader, inventory=im)
            play = Play.load({"hosts": "all", "gather_facts": False,
                              "roles": [str(PROJECT_ROOT / "roles" / r) for r in roles]},
                             variable_manager=vm, loader=loader)
            target = im.get_host(host)
            if target is None:
                raise UserError(f"{path}: no host '{host}'")
            return {"_loader": loader, **vm.get_vars(play=play, host=target)}
    except AnsibleError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}: {first}") from None


def _resolver(hv: dict, where: str):
    # Ansible on first use: a heavy import, kept out of every command's startup
    from ansible.errors import AnsibleError
    from ansible.template import Templar

    templar = Templar(loader=hv["_loader"], variables=hv)

    def get(name: str):
        try:
            return templar.template(hv[name])
        except KeyError:
            raise UserError(f"{where}: {name} is not defined") from None
        except AnsibleError as exc:
            raise UserError(f"{where}: {name}: {str(exc).strip().splitlines()[0]}") from None

    return get


def from_vars(get) -> Manifest:
    """The manifest from resolved role variables (get(name) -> value): pure, so a test
    can feed it any values."""
    driver = str(get("nvidia_driver_version"))
    # fabric manager matches the driver's upstream version with its own revision
    fm = driver.split("-")[0] + str(get("fabric_manager_package_revision"))
    cuda_major = str(get("cuda_toolkit_version")).split(".")[0]
    dcgm = str(get("dcgm_version"))
    dcgm_major = int(get("dcgm_cuda_major")) or cuda_major  # 0: the toolkit's CUDA major
    pkgs = [f"{p}={driver}" for p in get("nvidia_driver_packages")]
    pkgs += [f"{p}={fm}" for p in get("fabric_manager_packages")]
    pkgs.append(f"{get('__cuda_toolkit_package')}={get('cuda_toolkit_package_version')}")
    pkgs += [f"{p}={get('__nccl_package_version')}" for p in get("nccl_packages")]
    pkgs += [f"{get('__dcgm_core_package')}={dcgm}",
             f"{get('__dcgm_cuda_package_prefix')}{dcgm_major}={dcgm}"]
    if get("rdma_network_stack") == "doca":
        pkgs += list(get("rdma_network_doca_packages"))
    pkgs += list(get("rdma_network_tools_packages"))
    pkgs += list(get("os_baseline_packages"))
    pkgs += list(get("nvme_raid_tool_packages")) + list(get("__nvme_raid_packages"))
    pkgs += list(get("validation_tools_packages"))
    pkgs += list(get("__validation_tools_python_packages"))
    # nccl-tests as validation_tools installs it: its package at the pinned release
    # (<version>-<revision>), else the release's source and what builds it.
    version = str(get("validation_tools_nccl_tests_version"))
    sources: list[Source] = []
    package = str(get("validation_tools_nccl_tests_package"))
    if package:
        pkgs.append(f"{package}={version}-*")
    else:
        pkgs += list(get("__validation_tools_build_packages"))
        sources.append(Source(str(get("offline_bundle_nccl_tests_source_url")),
                              str(get("__validation_tools_nccl_tests_tarball"))))
    # The headers of the nodes' kernels, named as nvidia_driver installs them, so the
    # driver's DKMS build works with no network (apt adds their dependency closure).
    if get("nvidia_driver_install_headers"):
        kernels = [str(k) for k in get("offline_bundle_node_kernels")]
        for k in kernels:
            if not _KERNEL.match(k):
                raise UserError(f"offline_bundle_node_kernels: {k!r} is not a kernel release "
                                "(`uname -r` of a node)")
        prefix = str(get("__nvidia_driver_headers_prefix"))
        pkgs += [prefix + k for k in kernels or [KERNEL_FACT]]
    pkgs += list(get("offline_bundle_extra_packages"))
    return Manifest(tuple(dict.fromkeys(str(p) for p in pkgs)), tuple(sources), version)


def manifest(inventory: str | Path, host: str) -> Manifest:
    """What the bundle built on `host` (a staging host) must carry."""
    hv = role_vars(inventory, host)
    return from_vars(_resolver(hv, f"host '{host}'"))


def for_staging(inventory: str | Path, hosts: list[str]) -> Manifest:
    """One manifest for every staging host; hosts that disagree are a person's mistake."""
    found = {h: manifest(inventory, h) for h in hosts}
    first = next(iter(found.values()))
    for h, m in found.items():
        if m != first:
            raise UserError(f"staging hosts {hosts[0]} and {h} resolve different node "
                            "packages; build the bundle on one (--limit)")
    return first
