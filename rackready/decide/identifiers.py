"""The one form in which two reports of a GPU serial or UUID are compared.

A node, a BMC or a colluding pair can spell one identifier many ways: case, full-width
digits, a zero-width space, padding, a leading zero. Every comparison of identifiers
(one node's GPUs, a node against its inventory and its BMC, a serial on two nodes of a
rack, the failing part's wording) goes through id_key, so no check is evaded by spelling.
"""

from __future__ import annotations

import re
import unicodedata

# format, control and separator characters: invisible in a report, never part of an id
_INVISIBLE = frozenset({"Cf", "Cc", "Zs", "Zl", "Zp"})
_UUID = re.compile(r"(gpu-|mig-)?([0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?"
                   r"[0-9a-f]{12})")


def id_key(value: object) -> str:
    """Unicode NFKC (full-width digits become ASCII), invisible characters and whitespace
    dropped, case folded; a serial of digits only (NVIDIA's board serials) compared as a
    number, so a leading zero does not make another serial; a UUID ("GPU-" and 32 hex
    digits, hyphens optional) in its hyphenated form. Letters keep their leading zeros:
    a vendor's alphanumeric serial may begin with one that matters."""
    text = unicodedata.normalize("NFKC", str(value))
    text = "".join(ch for ch in text if unicodedata.category(ch) not in _INVISIBLE)
    text = unicodedata.normalize("NFKC", text.casefold())
    if text.isascii() and text.isdigit():
        return text.lstrip("0") or "0"
    uuid = _UUID.fullmatch(text)
    if uuid:
        hexits = uuid[2].replace("-", "")
        return (f"{uuid[1] or 'gpu-'}{hexits[:8]}-{hexits[8:12]}-{hexits[12:16]}-"
                f"{hexits[16:20]}-{hexits[20:]}")
    return text


def shown(value: object) -> str:
    """An identifier as a person reads it in a finding: as reported, escaped where it
    holds what does not print plainly (a zero-width space, full-width digits)."""
    text = str(value)
    return text if text.isascii() and text.isprintable() else ascii(text)
