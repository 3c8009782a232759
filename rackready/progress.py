"""Live progress of a validation run: one line per node.

On a terminal the lines are redrawn in place (current check, a bar with time
left for long workloads); otherwise each finished check prints one line, so
CI logs stay readable.
"""

from __future__ import annotations

import sys
import threading
import time


class Board:
    def __init__(self, nodes: list[str], stream=None) -> None:
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.nodes = nodes
        self.lines = {n: "waiting" for n in nodes}
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.drawn = False
        self.width = max(len(n) for n in nodes) if nodes else 8

    def update(self, node: str, text: str) -> None:
        with self.lock:
            self.lines[node] = text
            if self.tty:
                self._redraw()

    def event(self, node: str, event: dict) -> None:
        kind = event.get("event")
        if kind == "check_started":
            self.update(node, f"{event.get('check')} ...")
        elif kind == "progress":
            frac = float(event.get("fraction") or 0.0)
            eta = event.get("eta_s")
            left = f" {eta:.0f}s left" if isinstance(eta, (int, float)) else ""
            label = f" {event['label']}" if event.get("label") else ""
            self.update(node, f"{event.get('check')} {_bar(frac)} {frac:4.0%}{left}{label}")
        elif kind == "check_finished":
            result = event.get("result", {})
            line = (f"{event.get('check')} {result.get('status')} "
                    f"({result.get('duration_s', 0):.1f}s)")
            self.update(node, line)
            if not self.tty:
                self._print(node, line)

    def finish(self, node: str, outcome: str, detail: str = "") -> None:
        line = outcome + (f": {detail}" if detail else "")
        self.update(node, line)
        if not self.tty:
            self._print(node, line)

    def close(self) -> None:
        with self.lock:
            if self.tty:
                self._redraw()

    def _print(self, node: str, text: str) -> None:
        with self.lock:
            print(f"{node:<{self.width}}  {text}", file=self.stream, flush=True)

    def _redraw(self) -> None:
        if self.drawn:
            self.stream.write(f"\x1b[{len(self.nodes)}F")
        for n in self.nodes:
            self.stream.write(f"\x1b[2K{n:<{self.width}}  {self.lines[n]}\n")
        self.stream.flush()
        self.drawn = True


def _bar(fraction: float, width: int = 20) -> str:
    filled = int(max(0.0, min(1.0, fraction)) * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"
