"""Turning Spark and py4j exceptions into one readable line for reports."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (Java stack traces are long)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__
