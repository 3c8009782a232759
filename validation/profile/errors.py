"""The one error a profile raises: a message of one line that names where."""

from __future__ import annotations


class ProfileError(ValueError):
    """A profile that cannot be trusted; the message is one line."""


def err(where: str, msg: str) -> ProfileError:
    return ProfileError(f"{where}: {msg}")
