"""Errors a person can fix: shown as one line, never as a traceback."""


class UserError(Exception):
    """A mistake in what was asked (bad flag, unknown node, malformed file).

    tasks.py turns it into `Exit(message, code=2)`.
    """


class EnvironmentProblem(UserError):
    """Something outside rackready is missing or wrong (not root, no package)."""
