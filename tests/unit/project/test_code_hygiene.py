"""Code speaks of the project, not of how it was built: no tracker issue numbers and no
branch-merge fences in the code, the profiles, the roles or the tests (an upstream
project's issue, named with its repository, is a source and stays)."""

from __future__ import annotations

import re
from pathlib import Path

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
TREES = ("rackready", "rackready_lab", "validation", "roles", "playbooks", "library", "tests",
         "bench")
SUFFIXES = {".py", ".yml", ".yaml", ".j2", ".sh", ".json", ".cfg", ".toml"}
# "issue 17", "(#17)"; not "NVIDIA/open-gpu-kernel-modules issue 1150" (an upstream source)
ISSUE = re.compile(r"\bissues? \d+\b|\(#\d+\)")
UPSTREAM = re.compile(r"[\w.-]+/[\w.-]+ issue \d+")  # owner/repo issue N
FENCE = re.compile(r"^\s*# --- end\b|^\s*# --- .*(step|branch) .*---\s*$")


def offending(text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        cleaned = UPSTREAM.sub("", line)
        if ISSUE.search(cleaned) or FENCE.search(line):
            found.append(f"{n}: {line.strip()[:100]}")
    return found


def _files():
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "results" not in path.parts \
                    and path.name != Path(__file__).name:
                yield path


def test_no_issue_numbers_or_merge_fences_in_code():
    hits = {}
    for path in _files():
        found = offending(path.read_text(errors="replace"))
        if found:
            hits[str(path.relative_to(ROOT))] = found[:3]
    assert hits == {}


def test_the_rule_catches_what_it_is_for():
    assert offending("x = 1  # added for issue 16 (w16n)")
    assert offending("    # --- end rack-level step ---")
    assert offending("see (#24)")
    assert not offending("(leptonai/gpud issue 1085, NVIDIA/open-gpu-kernel-modules issue 1150)")
    assert offending("the rack-level issue 16 fix")  # a hyphenated word is no repository
    assert not offending("# --- the rack's reference-job curves compared with each other ---")
