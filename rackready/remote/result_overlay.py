"""How the controller reads result.json differently from the node's schema: all of it.

The node's schema (validation/schema/result.schema.json) says what a healthy node writes;
rackready.remote.result_shape reads every key, type, enum and digest pattern from it. What
the controller does otherwise is stated here, and only here:

- it reads runs rebuilt from events too (rackready.run.rebuild): a required key may be
  absent (read as null or empty), a check may be "interrupted", a node "PARTIAL";
- it judges against its own profile, so the node's verdicts and thresholds are dropped,
  and what it judges nothing from (scope, inventory) is passed on as an object, unchecked;
- of the schema's enums and patterns it holds only those it decides on (a check's status,
  the claimed outcome, SHA-256 digests); a level or a timestamp is read as any text;
- a part of the wrong type is repaired to what cannot pass (a value to null, a check or
  measurement without its name or status left out, a flag it cannot read to "simulated")
  and named, so the node is INCOMPLETE (rackready.decide.outcome); counts are capped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# No figure a node measures comes near 1e18 in its unit (bytes, FLOP/s in TFLOPS, counts,
# seconds); past it a value is a lie or an overflow that every renderer, canonical form
# and statistic would have to survive. The report schema bounds its numbers by the same.
VALUE_BOUND = 1e18


@dataclass(frozen=True)
class ResultCaps:
    """How much one node's result may hold: bytes are capped by the fetch, counts here.

    Past a cap the rest is dropped (a text cut) and named as a MALFORMED problem, so the
    node is INCOMPLETE and the judge and reports only ever see a bounded result. Measured
    on tests/fixtures/h200x2-quick-result.json.gz (2 GPUs, quick): 27 checks, 677
    measurements, 264 in one check (gemm_burnin), at most 7 labels, the longest text 331
    characters, the longest check message 49; an 8-GPU standard run holds a few thousand
    measurements. Each cap is 10-100x that. What the reports cost per measurement
    (about 0.5 ms and 6 KB of memory for the JSON reports alone) is why the total is not
    higher: 100 000 measurements take about a minute and well under a GB.
    """

    checks: int = 500
    measurements_per_check: int = 50_000
    measurements: int = 100_000  # all checks together
    labels: int = 32  # per measurement; also entries of a list of texts (needs)
    text_chars: int = 1024  # a check or metric name, unit, label key or value, version
    message_chars: int = 16 << 10  # a check's message
    events: int = 200_000  # events streamed live, or read back from events.jsonl
    json_values: int = 4_000_000  # values one result.json may parse into (bounds memory)
    # the live stream, capped like result.json: its events together hold at most
    # json_values values; one event at most event_values (counted as commas and brackets:
    # the fixture's largest check_finished, gemm_burnin's 264 measurements, holds 2 361;
    # 26 lab runs of 8 simulated GPUs, quick and standard: at most 5 844 in one event,
    # 60 542 in all; a 1 MiB line of real measurements about 60 000), nested at most event_depth
    # containers (a real one: 5), no text (nor key) longer than message_chars
    event_values: int = 100_000
    event_depth: int = 16


@dataclass(frozen=True)
class Reading:
    """How the controller reads one key where it differs from the schema. Keys are
    named by their place: "outcome", "checks[].status", "checks[].measurements[].value"."""

    also: tuple[str, ...] = ()  # an enum the controller holds, and what it adds to it
    noun: str = ""  # what a wrong part is said not to be ("a version", "names")
    default: Any = None  # read for an absent key
    unreadable: Any = None  # read for a wrong one (unreadable_note says so)
    unreadable_note: str = ""
    bounded: bool = False  # a number past +-VALUE_BOUND is read as not measured
    message: bool = False  # text capped at message_chars, not text_chars
    when_present: bool = False  # absent or null: the key is left out
    whole_or_null: bool = False  # a list that is all right or null
    bracketed: bool = False  # a map's keys are paths: named as [key], not .key
    counted: bool = False  # a map's entries capped at ResultCaps.labels, keys cut
    stringified: bool = False  # a map's text value may be any scalar but null: its text


DROPPED = ("verdicts", "thresholds")  # the node's own judgement
PASSED_WHOLE = ("scope", "inventory")  # an object, its inside unchecked: nothing is judged from it
AS_TEXT_OF_ANYTHING = ("schema_version",)  # rundir refuses an unknown one first; rebuilt: null
# a list item without these is left out: it cannot be judged or named
# (its key, what it is called, whether problems inside name the item by it, not its index)
ITEM_NAMES = {"checks[]": ("check", "check name", True),
              "checks[].measurements[]": ("name", "metric name", False)}
# a list whose items are records (checks, measurements): (its count cap, in ResultCaps)
ITEM_CAPS = {"checks": "checks", "checks[].measurements": "measurements_per_check"}
UNLISTED_AS_IS = ("checks",)  # not a list: kept, the judge says so once ("no list of checks")
# patterns held (by their $defs name; an inline copy of one is held too): what is said
HELD_PATTERNS = {"sha256": "a SHA-256 digest"}

READINGS: dict[str, Reading] = {
    "checks[].status": Reading(also=("interrupted",)),  # a check a rebuilt run saw start
    "outcome": Reading(also=("PARTIAL",)),  # the controller's own, a narrowed run's
    # a report never claims real hardware on a flag it cannot read
    "simulated": Reading(default=False, unreadable=True, unreadable_note="; read as simulated"),
    "only": Reading(whole_or_null=True, noun="check names"),
    "resumed_at": Reading(when_present=True),
    "tool_versions": Reading(noun="a version"),
    "artifacts": Reading(bracketed=True),
    "checks[].duration_s": Reading(default=0.0, unreadable=0.0, noun="seconds"),
    "checks[].message": Reading(default="", message=True),
    "checks[].needs": Reading(noun="names"),
    "checks[].measurements[].value": Reading(noun="a number, text, boolean or null",
                                             bounded=True),
    "checks[].measurements[].unit": Reading(default=""),
    "checks[].measurements[].labels": Reading(noun="a label value", counted=True,
                                              stringified=True),
}
