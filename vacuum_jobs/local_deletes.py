"""Deleting files on local disks and on the stores Hadoop reaches, or moving them into a trash folder.

With a ``trash`` folder, files are moved into ``<trash>/<run id>/<authority and path>`` instead (a
rename: cheap on local disks, HDFS and ABFS with a hierarchical namespace), so that ``restore`` can
move them back and ``purge`` erase them later; the outcome records where each went. Local and Hadoop
file systems tell a file this run removed from one already gone themselves; across Spark task attempts
(a lost executor, speculation) the run's journal (:class:`DeleteJournal`) keeps that exact.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterable, Iterator

from lakeio.audit.contract import AuditAction
from lakeio.store import uris
from lakeio.store.filesystem import Storage
from lakeio.text import first_line
from lakeio.times import epoch_ms
from vacuum_jobs.deletes import Outcome, Target, out_of_time, trash_path


def delete_local(targets: Iterable[Target], run_id: str, trash: str | None = None, *, stop_at_ms: int | None = None,
                 clock: Callable[[], int] = epoch_ms) -> Iterator[Outcome]:
    """Remove local files (or move them into ``trash``) with their checksum side files, then the folders
    they leave empty (never the table root itself). Each is noted in the run's journal first: see
    :class:`DeleteJournal`. From ``stop_at_ms`` on (by ``clock``), each file left is ``deferred``."""
    journals: dict[str, DeleteJournal] = {}
    for target in targets:
        if out_of_time(stop_at_ms, now := clock()):
            yield Outcome.deferred(target, now)
            continue
        local = uris.local_path(target.path)
        if target.table_root not in journals:
            journals[target.table_root] = DeleteJournal(target.table_root, run_id)
        journal = journals[target.table_root]
        moved = trash_path(trash, run_id, target.path) if trash else None
        try:
            if not os.path.lexists(local):  # noted only once found: a note says the file was there
                raise FileNotFoundError(local)
            journal.note(target.path)
            if moved:
                os.makedirs(os.path.dirname(uris.local_path(moved)), exist_ok=True)
                os.rename(local, uris.local_path(moved))
            else:
                os.remove(local)
        except FileNotFoundError:
            action = journal.gone(target.path)  # deleted by a twin attempt: moved to the same place
            yield Outcome(target, action, None, epoch_ms(), trash_path=moved if action is AuditAction.DELETED else None)
            continue
        except OSError as exc:
            yield Outcome(target, AuditAction.FAILED, f"{type(exc).__name__}: {exc}", epoch_ms())
            continue
        _remove_checksum(local)
        yield Outcome(target, AuditAction.DELETED, None, epoch_ms(), trash_path=moved)
        prune_empty_folders(os.path.dirname(local), uris.local_path(target.table_root))


def _remove_checksum(local: str) -> None:
    """Hadoop's checksum of a local file (``.<name>.crc`` beside it, written when Spark wrote the file),
    which Hadoop's file system, and so Delta's VACUUM, deletes with the file: hidden, no vacuum plans it,
    so left here it would stay for good. One that cannot be removed costs nothing but its bytes."""
    folder, name = os.path.split(local)
    with contextlib.suppress(OSError):
        os.remove(os.path.join(folder, f".{name}.crc"))


class DeleteJournal:
    """The local files one run set out to delete from one table, noted by each task attempt
    before it removes them: ``<table root>/_vacuum_journal/<run id>/<attempt>.txt``, one line each.

    A retried or speculative attempt that finds a file gone reads the other attempts' notes: a
    file one of them noted was deleted by this run. The driver removes the run's folder once the
    outcomes are recorded; a run killed before that leaves it behind (hidden: no vacuum deletes
    it) for the next run to read back (vacuum_jobs.interrupted), which then removes it."""

    FOLDER = "_vacuum_journal"

    def __init__(self, table_root: str, run_id: str):
        self.folder = os.path.join(uris.local_path(table_root), self.FOLDER, run_id)
        self.own = f"{uuid.uuid4().hex}.txt"
        self._others: set[str] = set()

    def note(self, path: str) -> None:
        os.makedirs(self.folder, exist_ok=True)
        with open(os.path.join(self.folder, self.own), "a", encoding="utf-8") as notes:
            notes.write(path + "\n")

    def gone(self, path: str) -> AuditAction:
        """What a file this attempt finds gone was: deleted by another attempt of the run, if one
        noted it (read again on a miss: a twin attempt may be deleting right now), else already absent."""
        if path not in self._others:
            self._others = set()
            for name in (os.listdir(self.folder) if os.path.isdir(self.folder) else ()):
                if name != self.own:
                    with open(os.path.join(self.folder, name), encoding="utf-8") as notes:
                        self._others.update(notes.read().splitlines())
        return AuditAction.DELETED if path in self._others else AuditAction.ALREADY_ABSENT

    @classmethod
    def remove(cls, storage: Storage, table_roots: Iterable[str], run_id: str) -> None:
        """Drop the run's notes (and the journal folder, once empty) of local ``table_roots``."""
        for root in table_roots:
            if uris.scheme_of(root) == "file":
                journal = uris.join(root, cls.FOLDER)
                storage.delete(uris.join(journal, run_id), recursive=True)
                storage.remove_if_empty(journal)  # another run's notes, written meanwhile, stay


def prune_empty_folders(folder: str, stop_at: str) -> None:
    """Remove ``folder`` and its parents while they are empty, up to (not including) ``stop_at``."""
    while folder.startswith(stop_at.rstrip("/") + "/"):
        try:
            os.rmdir(folder)
        except OSError:  # not empty (or already gone): stop climbing
            return
        folder = os.path.dirname(folder)


def delete_with_hadoop(storage: Storage, targets: Iterable[Target], run_id: str,
                       trash: str | None = None, *, stop_at_ms: int | None = None) -> Iterator[Outcome]:
    """Driver-side deletes (or moves into ``trash``) for stores Python executors cannot reach
    (HDFS, ABFS, GCS, ...); from ``stop_at_ms`` on, each file left is ``deferred``."""
    for target in targets:
        if out_of_time(stop_at_ms, now := epoch_ms()):
            yield Outcome.deferred(target, now)
            continue
        try:
            moved = trash_path(trash, run_id, target.path) if trash else None
            if storage.move(target.path, moved) if moved else storage.delete(target.path):
                yield Outcome(target, AuditAction.DELETED, None, epoch_ms(), trash_path=moved)
            else:
                yield Outcome(target, AuditAction.ALREADY_ABSENT, None, epoch_ms())
        except Exception as exc:
            yield Outcome(target, AuditAction.FAILED, first_line(exc), epoch_ms())
