"""Write a node's simulated hardware (controller side).

The rendering itself lives in cli/sysroot_render.py (standard library only)
because node-side tools re-render after they change the state.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .cli.sysroot_render import render_sysroot

__all__ = ["read_node_state", "render_sysroot", "write_node_state"]

STATE_REL = Path("var/lib/hwsim/state.json")
ROOT_REL = Path("var/lib/hwsim/root")


def write_node_state(state: dict[str, Any], node_root: Path) -> None:
    """node_root/var/lib/hwsim/state.json plus the rendered sysroot beside it."""
    path = Path(node_root) / STATE_REL
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)  # tools on the node never see a half-written file
    root = Path(node_root) / ROOT_REL
    root.mkdir(parents=True, exist_ok=True)
    render_sysroot(state, root)


def read_node_state(node_root: Path) -> dict[str, Any]:
    """The node's current state, with what its tools changed (modules, NIC settings)."""
    return json.loads((Path(node_root) / STATE_REL).read_text())
