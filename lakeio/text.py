"""Text for people: one-line errors out of long Java traces, byte counts they can read."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (Java stack traces are long)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


def human_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
