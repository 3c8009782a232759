"""`invoke provision`: playbooks/site.yml over an inventory, through ansible-runner."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rackready.errors import UserError
from rackready.site.inventory import check_inventory, hosts_in_group
from rackready.site.paths import PROJECT_ROOT, inventory_path
from rackready.site.vault import vault_env
from rackready.steps.offline_manifest import for_staging

PLAYBOOKS = PROJECT_ROOT / "playbooks"


@dataclass
class RunResult:
    rc: int
    status: str
    stats: dict[str, dict[str, int]] = field(default_factory=dict)  # host -> counters
    failures: dict[str, str] = field(default_factory=dict)  # host -> first failure message
    stdout_path: Path | None = None

    def changed(self) -> dict[str, int]:
        return {h: s.get("changed", 0) for h, s in self.stats.items()}


# Ansible's own tag words, always accepted.
SPECIAL_TAGS = frozenset({"all", "always", "never", "tagged", "untagged"})


def known_tags() -> set[str]:
    """Every tag the playbooks and roles declare (a play's or a task's `tags:`)."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            tags = node.get("tags")
            found.update([tags] if isinstance(tags, str) else
                         [str(t) for t in tags] if isinstance(tags, list) else [])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for f in sorted([*PLAYBOOKS.glob("*.yml"), *(PROJECT_ROOT / "roles").glob("*/tasks/*.yml")]):
        walk(yaml.safe_load(f.read_text(encoding="utf-8")))
    return found


def _check_tags(tags: str | None) -> None:
    """A mistyped tag would select nothing and every host would read "ok": refuse it."""
    if not tags:
        return
    asked = {t.strip() for t in tags.split(",") if t.strip()}
    unknown = sorted(asked - known_tags() - SPECIAL_TAGS)
    if unknown:
        raise UserError(f"--tags: unknown tag(s) {', '.join(unknown)} "
                        f"(known: {', '.join(sorted(known_tags()))})")


# What `invoke provision --playbook` may run (playbooks/<name>.yml).
PLAYBOOK_NAMES = ("site", "slurm")


def run_playbook(
    inventory: Path | str,
    playbook: str = "site.yml",
    *,
    limit: str | None = None,
    tags: str | None = None,
    check: bool = False,
    diff: bool = False,
    extravars: dict | None = None,
    quiet: bool = False,
    forks: int = 20,
) -> RunResult:
    """Run a playbook; collect per-host stats and each failed host's first reason."""
    # Ansible on first use: a heavy import, kept out of every command's startup
    import ansible_runner

    inv = inventory_path(str(inventory)) if not Path(inventory).is_file() else Path(inventory)
    # Ansible alone would run a malformed or empty inventory against no host and exit 0.
    check_inventory(inv, vault_files_needed=True)
    book = PLAYBOOKS / playbook
    if not book.exists():
        raise UserError(f"no playbook {book.relative_to(PROJECT_ROOT)}")
    _check_tags(tags)
    cmdline = []
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    private = Path(tempfile.mkdtemp(prefix="rackready-runner-"))
    failures: dict[str, str] = {}

    def on_event(event: dict) -> bool:
        data = event.get("event_data", {})
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            if event["event"] == "runner_on_failed" and data.get("ignore_errors"):
                return True
            host = data.get("host", "?")
            res = data.get("res", {})
            msg = str(res.get("msg") or res.get("stderr") or "failed").strip().splitlines()
            failures.setdefault(host, f"{data.get('task', '')}: {msg[0] if msg else ''}")
        return True

    try:
        r = ansible_runner.run(
            private_data_dir=str(private),
            project_dir=str(PROJECT_ROOT),
            playbook=str(book),
            inventory=str(inv.resolve()),
            limit=limit,
            tags=tags,
            cmdline=" ".join(cmdline) or None,
            extravars=extravars or {},
            forks=forks,
            quiet=quiet,
            event_handler=on_event,
            envvars={
                "ANSIBLE_CONFIG": str(PROJECT_ROOT / "ansible.cfg"),
                # ansible-playbook from the same environment as rackready
                "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
                **vault_env(inv),  # the inventory's own vault password file, if none is configured
            },
        )
        stats = r.stats or {}
        per_host: dict[str, dict[str, int]] = {}
        for key in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored"):
            for host, n in (stats.get(key) or {}).items():
                per_host.setdefault(host, {})[key] = n
        stdout = PROJECT_ROOT / "artifacts" / "provision-last.log"
        stdout.parent.mkdir(exist_ok=True)
        shutil.copy(r.stdout.name, stdout)
        return RunResult(r.rc, r.status, per_host, failures, stdout)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def report_run(result: RunResult, out=print) -> int:
    """One line per host: changed count or the reason it failed. 1 if any host failed."""
    hosts = sorted(set(result.stats) | set(result.failures))
    for host in hosts:
        s = result.stats.get(host, {})
        if host in result.failures or s.get("failures") or s.get("dark"):
            reason = result.failures.get(host, "failed")
            out(f"{host:<14} FAILED   {reason}")
        else:
            out(f"{host:<14} ok       changed={s.get('changed', 0)}")
    if not hosts and result.rc != 0:
        out(f"provisioning did not run ({result.status}); see the log")
    if result.stdout_path:
        out(f"log: {result.stdout_path}")
    failed = result.rc != 0 or any(h in result.failures for h in hosts)
    return 1 if failed else 0


def build_bundle(
    inventory: Path | str,
    *,
    key_id: str | None = None,
    limit: str | None = None,
    bundle_dir: str | None = None,
    wheelhouse: str | None = None,
    quiet: bool = False,
) -> RunResult:
    """playbooks/offline_bundle.yml on the inventory's `staging` hosts."""
    staging = hosts_in_group(str(inventory), "staging")
    if not staging:
        raise UserError(f"inventory '{inventory}' has no host in group 'staging' "
                        "(the connected host that builds the bundle)")
    # The packages and sources the node roles' variables name (one source of versions).
    extravars = for_staging(inventory, [h for h in staging if h == limit] or staging).extravars()
    extravars |= {
        name: value
        for name, value in (("offline_bundle_gpg_key_id", key_id),
                            ("offline_bundle_dir", bundle_dir),
                            ("offline_bundle_wheelhouse_url", wheelhouse))
        if value
    }
    return run_playbook(inventory, "offline_bundle.yml", limit=limit, extravars=extravars,
                        quiet=quiet)
