"""Which files of a ``_delta_log`` describe a table's newest snapshot (PROTOCOL.md "Log Segment").

The listing of ``_delta_log/`` is authoritative; ``_last_checkpoint`` is only a hint a
writer may leave corrupt or stale, so it is not needed here. We take the newest
*complete* checkpoint (classic, multi-part with every part present, or v2) and the
JSON commits after it, which must be contiguous.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lakeio.errors import HousekeepingError
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import first_line

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2 = re.compile(r"^(\d{20})\.checkpoint\.[0-9A-Fa-f-]{36}\.(json|parquet)$")
_VERSIONED = re.compile(r"^(\d{20})\.")  # any of the above, by its version


class UnreadableLog(HousekeepingError):
    """The log cannot give a trustworthy snapshot; the table must not be vacuumed."""


@dataclass(frozen=True)
class LogSegment:
    table_root: str  # as given: where the log is listed and read
    version: int
    checkpoint_version: int | None = None
    checkpoint_parquet: tuple[str, ...] = ()  # classic, multi-part parts, or a v2 parquet top-level file
    checkpoint_json: tuple[str, ...] = ()  # a v2 JSON top-level file
    commits: tuple[tuple[int, str], ...] = field(default_factory=tuple)  # (version, uri) after the checkpoint

    @property
    def root(self) -> uris.TableRoot:
        return uris.table_root(self.table_root)


def log_segment(storage: Storage, table_root: str) -> LogSegment:
    """The newest snapshot's log files, or :class:`UnreadableLog` saying why there is none."""
    return segment_from_listing(table_root, _log_files(storage, table_root))


def log_segment_at(storage: Storage, table_root: str, version: int) -> LogSegment:
    """The log files of the snapshot at ``version`` (time travel: the newest complete checkpoint at or
    before it and the commits after it, up to ``version``); :class:`UnreadableLog` when the log does not
    hold that version (cleaned up, or not written yet)."""
    files = [uri for uri in _log_files(storage, table_root)
             if (m := _VERSIONED.match(uris.name(uri))) and int(m.group(1)) <= version]
    at = segment_from_listing(table_root, files)
    if at.version != version:
        raise UnreadableLog(f"{uris.join(table_root, '_delta_log')}: holds no version {version} to read")
    return at


def _log_files(storage: Storage, table_root: str) -> list[str]:
    log_dir = uris.join(table_root, "_delta_log")
    try:
        listing = storage.list(log_dir)
    except Exception as exc:  # permission, throttling, ...
        raise UnreadableLog(f"{log_dir}: cannot list: {first_line(exc)}") from None
    return [status.uri for status in listing if not status.is_dir]


def log_segments(storage: Storage, table_roots: Sequence[str]) -> tuple[list[LogSegment], dict[str, str]]:
    """Segments of many tables, and ``{table_root: why}`` for those whose log is unreadable.

    Every ``_delta_log/`` is listed in one go (see Storage.files_in); if that fails, each
    folder is listed alone, several at a time, so that each table gets its own reason."""

    def find(root: str, files: list[str] | None = None) -> LogSegment | UnreadableLog:
        try:
            return log_segment(storage, root) if files is None else segment_from_listing(root, files)
        except UnreadableLog as exc:
            return exc

    try:
        log_dirs = [uris.join(root, "_delta_log") for root in table_roots]
        listed = storage.files_in(log_dirs)
        found = [find(root, listed[log_dir]) for root, log_dir in zip(table_roots, log_dirs)]
    except Exception:
        with ThreadPoolExecutor(max_workers=16) as pool:
            found = list(pool.map(find, table_roots))
    segments = [f for f in found if isinstance(f, LogSegment)]
    failures = {root: str(f) for root, f in zip(table_roots, found) if isinstance(f, UnreadableLog)}
    return segments, failures


def segment_from_listing(table_root: str, files: list[str]) -> LogSegment:
    """The segment from the URIs of the files directly in ``_delta_log/``."""
    log_dir = uris.join(table_root, "_delta_log")
    commits: dict[int, str] = {}
    checkpoints: dict[int, dict[str, Any]] = {}
    for uri in files:
        file_name = uris.name(uri)
        if m := _COMMIT.match(file_name):
            commits[int(m.group(1))] = uri
        elif m := _CLASSIC.match(file_name):
            checkpoints.setdefault(int(m.group(1)), {})["classic"] = uri
        elif m := _MULTIPART.match(file_name):
            parts = checkpoints.setdefault(int(m.group(1)), {}).setdefault("multipart", {})
            parts.setdefault(int(m.group(3)), {})[int(m.group(2))] = uri
        elif m := _V2.match(file_name):
            checkpoints.setdefault(int(m.group(1)), {})["v2_" + m.group(2)] = uri
    if not commits and not checkpoints:
        raise UnreadableLog(f"{log_dir}: no commits or checkpoints (not a Delta table?)")
    latest = max([*commits, *checkpoints])
    for version in sorted(checkpoints, reverse=True):
        chosen = _complete_checkpoint(checkpoints[version])
        if chosen is None:
            continue
        after = _contiguous(log_dir, commits, version + 1, latest)
        return LogSegment(table_root, latest, version, chosen[0], chosen[1], after)
    if 0 not in commits:
        raise UnreadableLog(f"{log_dir}: no complete checkpoint and no commit 0 (log cleaned up or truncated)")
    return LogSegment(table_root, latest, None, (), (), _contiguous(log_dir, commits, 0, latest))


def _complete_checkpoint(found: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(parquet files, json files) of a usable checkpoint at one version, preferring v2."""
    if "v2_json" in found:
        return (), (found["v2_json"],)
    if "v2_parquet" in found:
        return (found["v2_parquet"],), ()
    if "classic" in found:
        return (found["classic"],), ()
    for total, parts in sorted(found.get("multipart", {}).items(), reverse=True):
        if sorted(parts) == list(range(1, total + 1)):
            return tuple(parts[i] for i in range(1, total + 1)), ()
    return None


def _contiguous(log_dir: str, commits: dict[int, str], first: int, last: int) -> tuple[tuple[int, str], ...]:
    missing = [v for v in range(first, last + 1) if v not in commits]
    if missing:
        raise UnreadableLog(f"{log_dir}: commit versions are not contiguous (missing {missing[:5]})")
    return tuple((v, commits[v]) for v in range(first, last + 1))
