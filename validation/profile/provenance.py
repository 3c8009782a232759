"""Named provenances: a sentence written once and referenced by name in many limits.

A profile file may hold `provenances:`, a mapping of names to sentences (merged across
the files like the inventory, a later file's name replacing a base's). A threshold's
provenance may name one or more of them, `{name}`, anywhere in its text; each stands for
its sentence. `{provisional}` is the profile's own `provisional:` sentence (why its floors
are provisional: "PROVISIONAL until measured on ..."), so one base limit serves GPUs whose
floors are provisional for their own reasons. A named sentence is plain text (it names
no other), and a name no file defines is refused.
"""

from __future__ import annotations

import re
from typing import Any

from validation.profile.errors import err

PROVISIONAL_MARK = "{provisional}"
_NAME = re.compile(r"\{([a-z][a-z0-9_]*)\}")


def sentences(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """The profile's named sentences (`provenances:`, each a non-empty plain string) and its
    `provisional:` (checked where a limit names it), read once per profile."""
    named = doc.get("provenances") or {}
    if not isinstance(named, dict):
        raise err(where, "provenances must be a mapping of names to sentences")
    for name, text in named.items():
        if not (isinstance(name, str) and _NAME.fullmatch(f"{{{name}}}")) or name == "provisional":
            raise err(where, f"provenances: {name!r} is not a name (lower case, digits, _; "
                             "not provisional, which is the profile's `provisional:`)")
        if not isinstance(text, str) or not text.strip() or _NAME.search(text):
            raise err(where, f"provenances.{name}: a non-empty sentence naming no other")
    return {**named, "provisional": doc.get("provisional")}


def resolve(raw: Any, named: dict[str, Any], where: str) -> Any:
    """The threshold with every `{name}` of its provenance replaced by its sentence."""
    if not isinstance(raw, dict) or "{" not in str(raw.get("provenance", "")):
        return raw
    text = str(raw["provenance"])
    if PROVISIONAL_MARK in text:
        note = named.get("provisional")
        if not isinstance(note, str) or not note.startswith("PROVISIONAL"):
            raise err(where, f"{raw.get('metric', '?')}: provenance starts with "
                             f"{PROVISIONAL_MARK}, so the profile needs `provisional:`, a "
                             "sentence that starts with PROVISIONAL")

    def sentence(m: re.Match[str]) -> str:
        if named.get(m.group(1)) is None:
            raise err(where, f"{raw.get('metric', '?')}: provenance names {m.group(0)}, "
                             "which no file's `provenances:` defines")
        return str(named[m.group(1)])

    return {**raw, "provenance": _NAME.sub(sentence, text)}
