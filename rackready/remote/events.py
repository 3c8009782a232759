"""The node's stdout: lines split and sorted into events (checked field by field),
bad event lines and plain log text."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rackready.remote import result_shape
from rackready.remote.nodelog import NodeLog
from rackready.remote.records import Limits, NodeEvent, SessionOutcome
from rackready.remote.runner import Fail, Stop, size_text
from rackready.sanitize import one_line, replace_surrogates_in


class EventSink:
    """Splits stdout into lines and sorts them: events (appended to the events file, counted
    in the outcome, passed to on_event), bad event lines and plain log text (into the
    node's log)."""

    def __init__(self, events: Path, limits: Limits, out: SessionOutcome, log: NodeLog,
                 on_event: Callable[[NodeEvent], None]) -> None:
        self.limits = limits
        self.out = out
        self.log = log
        self.on_event = on_event
        self.partial = bytearray()
        self.skipping = False  # inside an over-long line
        self.bytes = 0
        self.values = 0  # JSON values in the events passed on so far (capped like a result)
        try:
            events.parent.mkdir(parents=True, exist_ok=True)
            self.fh = events.open("ab")
        except OSError as exc:
            raise Fail(f"cannot write {events} on the controller: "
                       f"{exc.strerror}") from None

    def close(self) -> None:
        self.fh.close()

    def feed(self, data: bytes) -> None:
        self.bytes += len(data)
        if self.bytes > self.limits.max_stream_bytes:
            raise Stop(f"sent more than {size_text(self.limits.max_stream_bytes)} on stdout")
        start = 0
        while True:
            nl = data.find(b"\n", start)
            piece = data[start:] if nl < 0 else data[start:nl]
            if not self.skipping:
                self.partial += piece
                if len(self.partial) > self.limits.max_line_bytes:
                    self._long()
            if nl < 0:
                return
            if self.skipping:
                self.skipping = False
            else:
                self._line(bytes(self.partial))
                self.partial.clear()
            start = nl + 1

    def finish(self) -> None:
        """The stream ended: a last line without a newline still counts."""
        if self.partial and not self.skipping:
            self._line(bytes(self.partial))
        self.partial.clear()

    def _long(self) -> None:
        self.partial.clear()
        self.skipping = True
        self._bad(f"a line longer than {size_text(self.limits.max_line_bytes)}", b"")

    def _line(self, raw: bytes) -> None:
        text = raw.rstrip(b"\r")
        stripped = text.strip()
        if not stripped:
            return
        if not stripped.startswith((b"{", b"[")):
            self.log.log_text(text.decode(errors="replace") + "\n")
            return
        caps = result_shape.CAPS  # read now: a test may narrow them
        # commas and brackets bound the values from above: "[{},{},...]" costs far more
        # memory parsed than its bytes, so an event over the cap is never parsed
        if _tokens(text) > caps.event_values:
            raise Stop(f"sent an event over the cap of {caps.event_values} values")
        try:
            event = json.loads(text.decode("utf-8"), parse_constant=_reject_constant,
                               parse_float=_finite_float)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UTF-8 are ValueErrors
            self._bad(f"not JSON ({one_line(str(exc), 80)})", text)
            return
        if b"\\u" in text:  # lone surrogates ("\ud800") are valid JSON but no text
            event = replace_surrogates_in(event)
        why = event_problem(event)
        if why:
            self._bad(why, text)
            return
        if self.out.events >= self.limits.max_events:
            raise Stop(f"sent more than {self.limits.max_events} events")
        self.values += _within_caps(event, caps)
        if self.values > caps.json_values:
            raise Stop(f"sent events holding more than {caps.json_values} JSON values "
                        f"together, over the cap of {caps.json_values} JSON values")
        self.fh.write(text + b"\n")
        self.fh.flush()  # a controller that dies keeps what arrived
        self.out.events += 1
        try:
            self.on_event(event)
        except Exception as exc:  # the event came from the node; it must not end the session
            self.log.note_some("events the controller could not show",
                              f"the controller could not show an event: "
                              f"{type(exc).__name__}: {exc}")

    def _bad(self, why: str, text: bytes) -> None:
        self.out.bad_lines += 1
        sample = one_line(text[:200].decode(errors="replace"), 200)
        self.log.note_some("bad event lines", f"bad event line ({why}): {sample}")


def _tokens(text: bytes) -> int:
    return text.count(b",") + text.count(b"{") + text.count(b"[")


def _within_caps(event: Any, caps: result_shape.ResultCaps) -> int:
    """The values one parsed event holds; Stop naming the cap when it is nested deeper
    than event_depth or holds a text (a key too) longer than message_chars."""
    count = 0
    todo: list[tuple[Any, int]] = [(event, 1)]
    while todo:
        value, depth = todo.pop()
        count += 1
        if isinstance(value, str):
            texts = [value]
        elif isinstance(value, dict | list):
            if depth > caps.event_depth:  # containers within containers, the event 1
                raise Stop(f"sent an event nested deeper than the cap of {caps.event_depth}")
            items = value.values() if isinstance(value, dict) else value
            texts = list(value) if isinstance(value, dict) else []
            todo.extend((v, depth + 1) for v in items)
        else:
            continue
        for text in texts:
            if len(text) > caps.message_chars:
                raise Stop(f"sent an event with a text of {len(text)} characters, over the "
                            f"cap of {caps.message_chars} characters")
    return count


def event_problem(event: Any) -> str:
    """Why a parsed stdout line is not an event we pass on ("" when it is fine)."""
    if not isinstance(event, dict):
        return f"a JSON {type(event).__name__}, not an object"
    kind = event.get("event")
    if not isinstance(kind, str):
        return "no string \"event\" field"
    for key, check in (*_COMMON_FIELDS, *_EVENT_FIELDS.get(kind, ())):
        if key in event and not check(event[key]):
            return f"{kind}: field {key!r} has the wrong type or range"
    for key in _REQUIRED.get(kind, ()):
        if key not in event:
            return f"{kind}: field {key!r} is missing"
    return ""


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _result(v: Any) -> bool:
    if not isinstance(v, dict):
        return False
    return all(k not in v or check(v[k]) for k, check in (
        ("check", _str), ("status", _str), ("message", _str), ("duration_s", _num),
        ("measurements", lambda m: isinstance(m, list) and all(isinstance(x, dict) for x in m)),
        ("needs", lambda n: isinstance(n, list) and all(isinstance(x, str) for x in n))))


_COMMON_FIELDS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("ts", _str), ("check", _str), ("node", _str), ("resumed", lambda v: isinstance(v, bool)))

_EVENT_FIELDS: dict[str, tuple[tuple[str, Callable[[Any], bool]], ...]] = {
    "run_started": (("run_id", _str), ("profile", _str), ("level", _str),
                    ("simulated", lambda v: isinstance(v, bool))),
    "progress": (("fraction", lambda v: _num(v) and 0 <= v <= 1),
                 ("eta_s", lambda v: v is None or _num(v)), ("label", _str)),
    "check_started": (("needs", lambda n: isinstance(n, list)
                       and all(isinstance(x, str) for x in n)),),
    "check_finished": (("result", _result),),
    "measurement": (("measurement", lambda m: isinstance(m, dict)
                     and isinstance(m.get("name"), str)),),
    # the start-of-run counters: a list of {counter, labels, value} records
    "health_start": (("counters", lambda v: isinstance(v, list)
                      and all(isinstance(x, dict) for x in v)), ("error", _str)),
    "run_finished": (("outcome", _str),),
}

_REQUIRED = {"progress": ("fraction",), "check_finished": ("check", "result"),
             "measurement": ("measurement",), "check_started": ("check",)}


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as inf
        raise _NonFinite(f"non-finite number {text[:20]}")
    return value
