"""Text for people: one-line errors out of long Java traces, byte counts they can read."""

from __future__ import annotations

import re
import sys

# Spark's preamble before a failed task's own error: the error is what names the file.
_TASK_FAILURE = re.compile(r"^(?:org\.apache\.spark\.SparkException: )?Job aborted due to stage failure: "
                           r".*?most recent failure: Lost task .*?\): ")


def first_line(exc: BaseException, limit: int = 300) -> str:
    """One line saying what went wrong: the message's first real line, plus the root cause
    when a Java stack trace names one (py4j wraps everything in "An error occurred while calling")."""
    lines = [ln.strip().lstrip(": ").strip() for ln in str(exc).splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("An error occurred while calling", "at "))]
    if not lines:
        return type(exc).__name__
    causes = [ln[len("Caused by: "):] for ln in lines if ln.startswith("Caused by: ")]
    lines[0] = _TASK_FAILURE.sub("", lines[0])
    text = lines[0] if not causes or causes[-1] in lines[0] else f"{lines[0]} (cause: {causes[-1]})"
    return text[:limit]


def human_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB``; negative for shrinkage."""
    sign, size = ("-" if n < 0 else ""), float(abs(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{sign}{int(size)} B" if unit == "B" else f"{sign}{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters from the left (the end of a path says the most)."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10: the same behaviour, by hand
    from enum import Enum

    class StrEnum(str, Enum):
        """Members are their value wherever text is expected (JSON, f-strings, Spark literals)."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)
