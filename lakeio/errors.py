"""The root of every error the jobs raise on purpose.

``except HousekeepingError`` catches what this project reports (an unreadable inventory, a table
it refuses, a run refused as a whole), and lets a bug or an interrupt through. Each error also
keeps the builtin base it always had (``ValueError``, ``OSError``, ...), so code that caught
those goes on working.
"""

from __future__ import annotations


class HousekeepingError(Exception):
    """An error this project raises on purpose; its message names the input and the problem."""


class InvalidOption(HousekeepingError, ValueError):
    """An option of the API (a setting, a count, a duration) outside what it can be; the message names it."""


class BadInputFile(HousekeepingError, ValueError):
    """A file the user gave (a tables file, a prices file, a request) cannot be read or parsed."""
