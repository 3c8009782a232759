"""A node's BMC access (rackready_bmc_*): address, account, a password that never prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rackready.site.paths import PROJECT_ROOT
from rackready.site.vault import _Facts

NO_ADDRESS = "no BMC address (rackready_bmc_address) in the inventory"


class Secret(str):
    """A password that prints as asterisks (repr, str formatting); .reveal() gives it."""

    def __repr__(self) -> str:
        return "'********'"

    def __str__(self) -> str:
        return "********"

    def __format__(self, spec: str) -> str:
        return "********"

    def reveal(self) -> str:
        return str.__str__(self)


@dataclass(frozen=True)
class BmcAccess:
    address: str
    user: str
    password: Secret = field(repr=False)
    ca_file: str | None
    # rackready_bmc_tls_insecure_skip_verify: only for a lab bring-up, named to be seen
    insecure_skip_verify: bool = False


def bmc_access(fact: _Facts) -> BmcAccess | None:
    """The node's BMC from rackready_bmc_*; None without an address (UserError: one line)."""
    address = str(fact.get("rackready_bmc_address", "") or "")
    if not address:
        return None
    # Ansible on first use: a heavy import, kept out of every command's startup
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader()  # the credentials come through lookups (env), as in Ansible
    ca = str(fact.get("rackready_bmc_ca_file", "") or "") or None
    if ca and not Path(ca).is_absolute():
        ca = str(Path(fact.v.get("inventory_dir") or PROJECT_ROOT) / ca)
    return BmcAccess(address=address, user=str(fact.get("rackready_bmc_user", "root")),
                     password=Secret(str(fact.get("rackready_bmc_password", "") or "")),
                     ca_file=ca,
                     insecure_skip_verify=bool(fact.get("rackready_bmc_tls_insecure_skip_verify",
                                                        False)))
