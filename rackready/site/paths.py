"""Where a site's files live: the project, its inventories, the roles' defaults."""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

from rackready.errors import UserError

PROJECT_ROOT = Path(__file__).resolve().parents[2]

INVENTORIES = PROJECT_ROOT / "inventories"

# the site layer's one log: what an inventory skips or ignores
log = logging.getLogger("rackready.site")


def inventory_path(name: str) -> Path:
    """inventories/<name>, or a path to an inventory folder or hosts file."""
    direct = Path(name)
    if direct.exists() and (direct.is_file() or (direct / "hosts.yml").exists()):
        return direct / "hosts.yml" if direct.is_dir() else direct
    path = INVENTORIES / name / "hosts.yml"
    if not path.exists():
        known = sorted(p.name for p in INVENTORIES.iterdir() if (p / "hosts.yml").exists())
        hint = "; run `invoke lab.up` first" if name == "lab" else ""
        raise UserError(
            f"unknown inventory '{name}' (known: {', '.join(known) or 'none'}){hint}"
        )
    return path


def role_default(role: str, name: str) -> str:
    """A literal role default (roles/<role>/defaults/main.yml), e.g. the venv path."""
    path = PROJECT_ROOT / "roles" / role / "defaults" / "main.yml"
    return str((yaml.safe_load(path.read_text(encoding="utf-8")) or {})[name])
