"""Time as the jobs keep it: epoch milliseconds in UTC, ISO-8601 strings for people."""

from __future__ import annotations

import time
from datetime import date, datetime, timezone

MS_PER_HOUR = 3_600_000


def hours_ms(hours: float) -> int:
    """A retention (or any span) given in hours, as the milliseconds every cutoff and log parameter holds:
    the one conversion, so that the cutoff a plan applies and the one a commit records agree."""
    return round(hours * MS_PER_HOUR)


def cutoff_ms(now_ms: int, retention_hours: float) -> int:
    """The instant before which a file is past a retention of ``retention_hours``, counted back from ``now_ms``."""
    return now_ms - hours_ms(retention_hours)


def epoch_ms() -> int:
    """Now, as the jobs stamp it (the options' ``now_ms`` stands in for it in tests)."""
    return time.time_ns() // 1_000_000


def iso_utc(ms: int) -> str:
    """``1700000000000`` -> ``2023-11-14T22:13:20+00:00``."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def midnight_utc_ms(day: date) -> int:
    """When an inventory of ``day`` was taken, at the latest: S3 lists objects as of about midnight UTC."""
    return int(datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp() * 1000)
