"""Errors that dtsim reports to a user as one clear message (exit code 2), never as a traceback."""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: unknown name, misspelt key, impossible layout, unreadable file.

    ``field`` is the dotted path of the offending key (``parallel.tp``) when there is one; the
    message says what is wrong and how to fix it.
    """

    def __init__(self, message: str, field: str | None = None):
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)
