"""Errors a person can fix (bad directory, bad file, missing Chromium).

Callers print str(err) on one line and exit 2; nothing here should ever
surface as a traceback.
"""

from __future__ import annotations

from pathlib import Path


class ReportError(Exception):
    """A mistake in the input or environment, worded for the operator."""

    def __init__(self, message: str, written: list[Path] | None = None) -> None:
        super().__init__(message)
        # Formats that were written before the error, so a caller can still list them.
        self.written: list[Path] = list(written or [])
