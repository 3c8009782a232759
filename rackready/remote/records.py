"""What one node's session is given and what it hands back: its limits, where it writes
on the controller, its outcome; the parts of the session (shipping, streaming events,
fetching) take these, never the session itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from rackready.remote.result_shape import CAPS

# One event line of the node's, parsed: a JSON object whose known fields
# rackready.remote.events.event_problem has checked; the rest is the node's (untrusted).
NodeEvent: TypeAlias = dict[str, Any]

# Whole-session deadline per validation level (the suite's own check timeouts sit inside).
LEVEL_DEADLINES: dict[str, float] = {"quick": 600.0, "standard": 1800.0, "burnin": 12 * 3600.0}


@dataclass(frozen=True)
class Limits:
    """Every cap on what one node may send, and every time limit of its session."""

    deadline_s: float  # preparing + running the suite (LEVEL_DEADLINES)
    idle_s: float = 300  # no byte on stdout/stderr this long -> stalled
    max_line_bytes: int = 1 << 20  # one event line; longer lines are dropped and counted
    max_events: int = CAPS.events
    max_stream_bytes: int = 256 << 20  # all of stdout
    max_stderr_bytes: int = 8 << 20  # node output kept in node.log; the rest counted, dropped
    max_file_bytes: int = 64 << 20  # one fetched file (result.json too)
    max_total_bytes: int = 512 << 20  # all fetched files of one node
    max_files: int = 5000  # entries listed under artifacts/
    fetch_s: float = 600  # fetching result.json and artifacts
    command_s: float = 120  # one preparation command or upload
    kill_grace_s: float = 10  # between SIGTERM and SIGKILL of the suite's process group

    @classmethod
    def for_level(cls, level: str, **overrides: Any) -> Limits:
        return cls(deadline_s=LEVEL_DEADLINES[level], **overrides)


@dataclass
class NodeFiles:
    """Where the session writes on the controller (chosen by the run-directory module)."""

    events: Path  # appended: every well-formed event line, as the node sent it
    log: Path  # appended: the commands run, stderr and non-event stdout (cleaned, capped)
    result: Path  # result.json, written only when fetched whole
    artifacts: Path  # the artifacts/ tree; nothing is written outside it


@dataclass
class SessionOutcome:
    rc: int | None  # the suite's exit status; None when it was stopped or never ran
    problem: str  # "" when the run ended normally; else one line
    events: int = 0
    bad_lines: int = 0  # malformed or over-long event lines (logged, never passed on)
    fetched: list[str] = field(default_factory=list)  # "result.json", "artifacts/a/b"
    refused: list[str] = field(default_factory=list)  # "'name': why", one per refusal
    result_fetched: bool = False
    remote_dir: str = ""  # R on the node
    dropped_log_bytes: int = 0  # node output over max_stderr_bytes
    shipped: bool = False  # the bundle was uploaded in this session
    duration_s: float = 0.0


class SessionError(Exception):
    """One line: why ship_bundle (or put_file) could not do its work on the node."""
