"""Clean text that came from a node before it reaches a terminal, HTML or XML.

A node can put escape sequences (terminal control), NUL or form feeds (invalid
XML 1.0) or bidirectional overrides (text that reads differently than it is)
into any string it sends. strip_control removes them and keeps the rest.
"""

from __future__ import annotations

import re

# C0 controls except \t and \n, DEL, C1 controls; \r goes too (it rewrites terminal lines).
# Bidi embeddings/overrides/isolates (U+202A-202E, U+2066-2069) reorder what a reader sees.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SPACES = re.compile(r"[\t\n]+")


def strip_control(text: str) -> str:
    """text without control characters; \\n and \\t are kept."""
    return _CONTROL.sub("", text)


def one_line(text: str, limit: int = 200) -> str:
    """text as one clean line of at most `limit` characters (for problem lines)."""
    line = _SPACES.sub(" ", strip_control(text)).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"
