"""node.log on the controller: the session's own notes and the node's output, cleaned
and capped (a node that floods it must not fill the controller's disk)."""

from __future__ import annotations

from typing import BinaryIO

from rackready.remote.runner import size_text
from rackready.sanitize import strip_control

NOTES_PER_KIND = 20  # notes of one kind about the node's output logged; the rest counted


class NodeLog:
    """Appends to an open node.log; with none (a session that only ships) notes go nowhere."""

    def __init__(self, fh: BinaryIO | None, cap: int) -> None:
        self.fh = fh
        self.cap = cap  # bytes of node output kept (Limits.max_stderr_bytes)
        self.budget = cap
        self.dropped = 0  # bytes of node output over the cap
        self.unlogged: dict[str, int] = {}  # notes past NOTES_PER_KIND, by kind

    def note(self, text: str) -> None:
        """A line of our own in node.log (not counted against the node's budget)."""
        if self.fh is not None:
            self.fh.write(f"[rackready] {strip_control(text)}\n".encode())
            self.fh.flush()

    def note_some(self, kind: str, text: str) -> None:
        """A note the node can cause once per line it sends: the first few of each kind
        are logged, the rest counted (a flood of them must not grow node.log unbounded)."""
        seen = self.unlogged.get(kind, -NOTES_PER_KIND)
        self.unlogged[kind] = seen + 1
        if seen < 0:
            self.note(text)

    def note_unlogged(self) -> None:
        for kind, n in self.unlogged.items():
            if n > 0:
                self.note(f"{n} more {kind} not logged (the first {NOTES_PER_KIND} are)")

    def log_text(self, text: str) -> None:
        """Node output into node.log: control characters stripped, capped."""
        data = strip_control(text).encode()
        keep = data[: max(0, self.budget)]
        self.budget -= len(keep)
        self.dropped += len(data) - len(keep)
        if keep:
            assert self.fh is not None  # node output arrives only in a session that logs
            self.fh.write(keep)
            self.fh.flush()

    def note_dropped(self) -> None:
        if self.dropped:
            self.note(f"{self.dropped} bytes of node output not kept "
                      f"(over the cap of {size_text(self.cap)})")
