"""One commit of a Delta table: where its file is, and what it did.

Every job that names a single commit reads it here: the audit hashes the commit a run planned
from, the re-check reads the commits written since planning, and the erasure evidence reads the
commit a request names. A commit file is ``_delta_log/<version, 20 digits>.json``; its ``add`` and
``remove`` paths are URIs relative to the table root (PROTOCOL.md "Actions").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lakeio.deltalog.paths import UnresolvablePath, resolve
from lakeio.errors import HousekeepingError
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import first_line


class UnreadableCommit(HousekeepingError, ValueError):
    """A commit file that cannot be read or parsed; the message names the file and the problem."""


def commit_file(table_root: str, version: int) -> str:
    """The URI of ``table_root``'s commit file for ``version``."""
    return uris.join(table_root, "_delta_log", f"{version:020d}.json")


@dataclass
class CommitRecord:
    """What one commit of a table did, as its log file says."""

    table: str  # canonical root
    version: int
    log_file: str
    timestamp_ms: int | None = None  # inCommitTimestamp, else commitInfo's timestamp
    operation: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, int | None] = field(default_factory=dict)  # data file -> deletionTimestamp
    deletion_vectors: dict[str, int | None] = field(default_factory=dict)  # re-added with a DV -> rows it hides


def read_commit(storage: Storage, table: str, version: int) -> CommitRecord:
    """Read commit ``version`` of ``table``; :class:`UnreadableCommit` naming the file when it cannot."""
    root = uris.canonical(table)
    log_file = commit_file(root, version)
    try:
        text = storage.read_bytes(log_file).decode("utf-8")
    except Exception as exc:
        raise UnreadableCommit(f"{log_file}: cannot read commit {version} ({first_line(exc, 160)}); "
                               "log retention may have removed it: ask by file path instead") from None
    record = CommitRecord(root, version, log_file)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError:
            raise UnreadableCommit(f"{log_file}: line {number} is not JSON") from None
        try:
            if "remove" in action:
                record.removed[resolve(root, action["remove"]["path"])] = action["remove"].get("deletionTimestamp")
            elif "add" in action and action["add"].get("deletionVector"):
                record.deletion_vectors[resolve(root, action["add"]["path"])] = \
                    action["add"]["deletionVector"].get("cardinality")
            elif "commitInfo" in action:
                info = action["commitInfo"]
                record.timestamp_ms = info.get("inCommitTimestamp", info.get("timestamp"))
                record.operation = info.get("operation")
                record.parameters = info.get("operationParameters") or {}
        except UnresolvablePath as exc:
            raise UnreadableCommit(f"{log_file}: line {number}: {exc}") from None
    return record
