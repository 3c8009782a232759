"""Clean text that came from a node before it reaches a terminal, HTML or XML.

A node can put escape sequences (terminal control), NUL or form feeds (invalid
XML 1.0) or bidirectional overrides (text that reads differently than it is)
into any string it sends. strip_control removes them and keeps the rest.

A node can also send lone surrogates ("\\ud800" is valid JSON but no Unicode
text: it has no UTF-8 form, so writing it raises). replace_surrogates turns
each into the visible escape it came as; rackready.run.rundir does that to all
node data as it is read, and strip_control does it too, for the renderers.
"""

from __future__ import annotations

import re

# C0 controls except \t and \n, DEL, C1 controls; \r goes too (it rewrites terminal lines).
# Bidi embeddings/overrides/isolates (U+202A-202E, U+2066-2069) reorder what a reader sees.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SPACES = re.compile(r"[\t\n]+")
# json.loads pairs a high and a low surrogate into one character: any left are lone
_SURROGATE = re.compile("[\ud800-\udfff]")
# what XML 1.0 forbids beyond the controls: surrogates (gone already) and U+FFFE, U+FFFF
_XML_ILLEGAL = re.compile("[\ufffe\uffff]")


def has_control(text: str) -> bool:
    """Whether strip_control would remove anything but surrogates."""
    return _CONTROL.search(text) is not None


def has_surrogates(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def replace_surrogates(text: str) -> str:
    """text with each lone surrogate written as its escape (\\ud800): valid Unicode,
    and two different ones stay different."""
    if not has_surrogates(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def replace_surrogates_in(value: object) -> object:
    """A parsed JSON value with replace_surrogates applied to every text and key."""
    if isinstance(value, str):
        return replace_surrogates(value)
    if isinstance(value, dict):
        return {replace_surrogates(k): replace_surrogates_in(v) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_surrogates_in(v) for v in value]
    return value


def strip_control(text: str) -> str:
    """text without control characters; \\n and \\t are kept; surrogates escaped."""
    return _CONTROL.sub("", replace_surrogates(text))


def xml_text(text: str) -> str:
    """strip_control, and what else XML 1.0 forbids (U+FFFE, U+FFFF) removed."""
    return _XML_ILLEGAL.sub("", strip_control(text))


def one_line(text: str, limit: int = 200) -> str:
    """text as one clean line of at most `limit` characters (for problem lines)."""
    line = _SPACES.sub(" ", strip_control(text)).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"
