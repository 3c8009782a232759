"""The profiles' golden: every listable profile resolves to exactly what it did.

How a profile is written (bases, overlays, pins in one file) may change; what the judge
is given may not. tests/unit/profile_dump.py rewrites the golden when a limit is meant
to change; the diff of the dump then shows what moved.
"""

from __future__ import annotations

import difflib
import json

from tests.unit.profile_dump import dump, golden
from validation.profile import list_profiles


def test_every_listable_profile_resolves_to_its_golden():
    want = json.dumps(golden(), indent=0, sort_keys=True) + "\n"
    got = dump()
    if got != want:
        diff = difflib.unified_diff(want.splitlines(), got.splitlines(), "golden", "now",
                                    lineterm="", n=2)
        raise AssertionError("\n".join(list(diff)[:60]))


def test_the_golden_covers_every_listable_profile():
    assert sorted(golden()) == list_profiles()
