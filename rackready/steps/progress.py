"""Live progress of a validation run: one line per node.

On a terminal the lines are redrawn in place (current check, a bar with time
left for long workloads); otherwise each finished check prints one line, so
CI logs stay readable.

The word next to a finished check is its verdict (PASS, FAIL, N/A, ERROR) as
the controller judges it against the node's profile (`judges`); a node's own
opinion is never shown as one. Where no judge is given for a node, the board
says only that the check ran and how it ended ("ran ok"). A node's final word
(PASS, FAIL, INCOMPLETE, PARTIAL) comes from the caller through finish().
Everything a node sent is stripped of control characters before it is shown.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rackready.sanitize import strip_control
from validation.judge import judge
from validation.model import CheckResult

VERDICTS = ("PASS", "FAIL", "N/A", "ERROR")
GREEN, RED, YELLOW = "32", "31", "33"
COLOURS = {"PASS": GREEN, "FAIL": RED, "ERROR": RED, "UNREACHABLE": RED,
           "N/A": YELLOW, "INCOMPLETE": YELLOW, "PARTIAL": YELLOW}

# A terminal is redrawn at most this often. Every redraw writes every node's line, so a
# redraw per event would cost the node count per event: quadratic in the rack's size.
REDRAW_S = 0.1

Judge = Callable[[dict], str]
Segment = tuple[str, str | None]  # text, colour code (None: plain)


def check_verdict(result: dict, profile: Any) -> str:
    """One check's verdict word: a CheckResult dict judged against a loaded profile.

    N/A    the check did not end ok and the profile does not require what it needs,
           or nothing it measured has a limit (nothing judged is never a pass)
    ERROR  it crashed, timed out or sent a result that cannot be read. The judge fails
           such a required check (and so the node); the board says ERROR so a reader
           tells a broken check from hardware that measured bad
    FAIL   any verdict of the check failed (a required check that could not run, too)
    PASS   it ended ok and every verdict of it passed
    """
    try:
        r = CheckResult.from_dict(result)
    except (KeyError, TypeError, ValueError, AttributeError):
        return "ERROR"
    verdicts = judge([r], profile)
    measured = {m.name for m in r.measurements}
    # judge() also answers for thresholds this check never touches (check "judge"): those
    # that fail name a labelled part of a metric this check measured, the rest are not its own
    own = [v for v in verdicts if v.check == r.check
           or (v.check == "judge" and v.outcome == "fail" and v.metric in measured)]
    if r.status != "ok":
        status = [v for v in own if v.metric == "check.status"]
        if status and all(v.outcome == "not_applicable" for v in status):
            return "N/A"
        if r.status in ("error", "timeout"):
            return "ERROR"
    if any(v.outcome == "fail" for v in own):
        return "FAIL"
    return "PASS" if any(v.outcome == "pass" for v in own) else "N/A"


def clean(text: Any) -> str:
    """Node-provided text as one line without control characters."""
    return re.sub(r"[\t\n]+", " ", strip_control(str(text)))


def colour_enabled(stream: Any) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org) or TERM=dumb."""
    isatty = getattr(stream, "isatty", None)
    return (bool(isatty and isatty()) and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM") != "dumb")


class Board:
    def __init__(self, nodes: list[str], stream=None,
                 judges: dict[str, Judge] | None = None, colour: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.colour = colour_enabled(self.stream) if colour is None else colour
        self.nodes = [clean(n) for n in nodes]
        self.judges = judges or {}
        self.segments: dict[str, list[Segment]] = {n: [("waiting", None)] for n in self.nodes}
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.drawn = False
        self.last_draw = float("-inf")  # monotonic time of the last redraw
        self.pending: threading.Timer | None = None  # the redraw waiting for REDRAW_S
        self.width = max(len(n) for n in self.nodes) if self.nodes else 8

    @property
    def lines(self) -> dict[str, str]:
        """Each node's current line as plain text."""
        return {n: "".join(t for t, _ in segs) for n, segs in self.segments.items()}

    def update(self, node: str, text: str) -> None:
        self._set(node, [(clean(text), None)])

    def event(self, node: str, event: dict) -> None:
        kind = event.get("event")
        check = clean(event.get("check"))
        if kind == "check_started":
            self._set(node, [(f"{check} ...", None)])
        elif kind == "progress":
            frac = _number(event.get("fraction")) or 0.0
            eta = _number(event.get("eta_s"))
            left = f" {eta:.0f}s left" if eta is not None else ""
            label = f" {clean(event['label'])}" if event.get("label") else ""
            self._set(node, [(f"{check} {_bar(frac)} {frac:4.0%}{left}{label}", None)])
        elif kind == "check_finished":
            result = event.get("result")
            result = result if isinstance(result, dict) else {}
            took = _number(result.get("duration_s")) or 0.0
            when = f" ({took:.1f}s{', resumed' if event.get('resumed') else ''})"
            word = self._verdict(node, result)
            if word is None:  # nobody judged it: say only that it ran, and how it ended
                segs: list[Segment] = [(f"{check} ran {clean(result.get('status'))}{when}",
                                        None)]
            else:
                segs = [(f"{check} ", None), (word, COLOURS.get(word)), (when, None)]
            self._set(node, segs)
            if not self.tty:
                self._print(node)

    def finish(self, node: str, outcome: str, detail: str = "") -> None:
        outcome = clean(outcome)
        segs: list[Segment] = [(outcome, COLOURS.get(outcome))]
        if detail:
            segs.append((f": {clean(detail)}", None))
        self._set(node, segs)
        if not self.tty:
            self._print(node)

    def close(self) -> None:
        with self.lock:
            if self.pending is not None:
                self.pending.cancel()
                self.pending = None
            if self.tty:
                self._redraw()

    def _verdict(self, node: str, result: dict) -> str | None:
        judge = self.judges.get(node)
        if judge is None:
            return None
        try:
            word = judge(result)
        except Exception:  # noqa: BLE001  a result the judge chokes on is no pass
            return "ERROR"
        return word if word in VERDICTS else "ERROR"

    def _set(self, node: str, segs: list[Segment]) -> None:
        node = clean(node)
        with self.lock:
            self.segments[node] = segs
            if self.tty:
                self._redraw_soon()

    def _redraw_soon(self) -> None:
        """Redraw now, or REDRAW_S after the last redraw (one timer for all the changes
        in between, so the last of them is drawn even when no other follows)."""
        wait = self.last_draw + REDRAW_S - time.monotonic()
        if wait <= 0:
            self._redraw()
        elif self.pending is None:
            self.pending = threading.Timer(wait, self._redraw_pending)
            self.pending.daemon = True
            self.pending.start()

    def _redraw_pending(self) -> None:
        with self.lock:
            if self.pending is not threading.current_thread():
                return  # cancelled by close(), which drew the board itself
            self.pending = None
            self._redraw()

    def _render(self, node: str, limit: int | None = None) -> str:
        """The node's line, cut to `limit` visible characters, coloured where enabled."""
        out, room = [], limit
        for text, code in [(f"{node:<{self.width}}  ", None), *self.segments.get(node, [])]:
            if room is not None:
                text, room = text[:room], max(0, room - len(text))
            if text:
                out.append(f"\x1b[{code}m{text}\x1b[0m" if code and self.colour else text)
        return self._encodable("".join(out))

    def _encodable(self, text: str) -> str:
        """What the stream can write: a node's text must never make the board raise."""
        enc = getattr(self.stream, "encoding", None) or "utf-8"
        try:
            return text.encode(enc, "replace").decode(enc)
        except LookupError:
            return text.encode("ascii", "replace").decode("ascii")

    def _print(self, node: str) -> None:
        with self.lock:
            print(self._render(clean(node)), file=self.stream, flush=True)

    def _redraw(self) -> None:
        # a line longer than the terminal wraps, and the cursor-up count would be wrong
        cols = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        if self.drawn:
            self.stream.write(f"\x1b[{len(self.nodes)}F")
        for n in self.nodes:
            self.stream.write(f"\x1b[2K{self._render(n, cols)}\n")
        self.stream.flush()
        self.drawn = True
        self.last_draw = time.monotonic()


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _bar(fraction: float, width: int = 20) -> str:
    filled = int(max(0.0, min(1.0, fraction)) * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"
