"""S3 Object Lock on one version of a key: what keeps it, and until when.

A version under a retention period (governance or compliance mode) or a legal hold cannot be
deleted: S3 refuses the delete of that version (a delete without a version id still adds a
delete marker). A purge meets the lock in S3's answer and asks the version's own headers
(``vacuum_jobs.deletes``); the erasure evidence reads it from the inventory's
``object_lock_*`` fields (``lake_reports.erasure_evidence``). Both say it in the words below.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lakeio.times import iso_utc

GOVERNANCE = "GOVERNANCE"  # a user with s3:BypassGovernanceRetention may delete before the date


@dataclass(frozen=True)
class Lock:
    """What S3 Object Lock keeps of one version: a retention date (and its mode), a legal hold, or both."""

    version_id: str
    until_ms: int | None = None  # the retention's end, epoch milliseconds
    mode: str | None = None  # GOVERNANCE or COMPLIANCE
    legal_hold: bool = False

    @classmethod
    def of(cls, version_id: str, until_ms: int | None, mode: str | None, legal_hold: str | None) -> Lock | None:
        """From S3's fields (the inventory's columns, HeadObject's headers); None where nothing locks it."""
        lock = cls(version_id, until_ms, (mode or "").upper() or None, (legal_hold or "").upper() == "ON")
        return lock if lock.legal_hold or lock.until_ms is not None else None

    @classmethod
    def of_head(cls, version_id: str, head: dict[str, Any]) -> Lock | None:
        """From a ``head_object`` answer of that version (botocore parses the date, with its zone)."""
        until: datetime | None = head.get("ObjectLockRetainUntilDate")
        return cls.of(version_id, None if until is None else int(until.timestamp() * 1000), head.get("ObjectLockMode"),
                      head.get("ObjectLockLegalHoldStatus"))

    def holds_at(self, now_ms: int) -> bool:
        """Whether S3 refuses to delete the version at ``now_ms``."""
        return self.legal_hold or (self.until_ms is not None and self.until_ms > now_ms)

    def erasable_from_ms(self, now_ms: int) -> int | None:
        """When the version can first be deleted: None while a legal hold stays (someone must lift it)."""
        if self.legal_hold:
            return None
        return max(self.until_ms or now_ms, now_ms)

    def describe(self, now_ms: int) -> str:
        """``version V locked until <date> (<mode> mode)``, ``... under a legal hold``, or both."""
        parts = []
        if self.until_ms is not None and self.until_ms > now_ms:
            mode = f" ({self.mode.lower()} mode)" if self.mode else ""
            parts.append(f"locked until {iso_utc(self.until_ms)}{mode}")
        if self.legal_hold:
            parts.append("under a legal hold")
        return f"version {self.version_id} " + (" and ".join(parts) or "no longer locked")
