"""The root of every error the jobs raise on purpose.

``except HousekeepingError`` catches what this project reports (an unreadable inventory, a table
it refuses, a run refused as a whole), and lets a bug or an interrupt through. Each error also
keeps the builtin base it always had (``ValueError``, ``OSError``, ...), so code that caught
those goes on working.
"""

from __future__ import annotations


class HousekeepingError(Exception):
    """An error this project raises on purpose; its message names the input and the problem."""
